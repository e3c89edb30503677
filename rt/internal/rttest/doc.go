// Package rttest is the runtime's test kit: the Ledger and Worker types that tests and the fault
// suite host, a throwaway PKI with node certificates, a raw peer that speaks the mesh protocol
// without the runtime's checks, and benchmark helpers.
package rttest
