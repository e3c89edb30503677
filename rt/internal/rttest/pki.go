package rttest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/zlink-go/zlink/rt/internal/transport"
	"github.com/zlink-go/zlink/sdk"
)

// PKI is a certificate authority of a test, signing certificates for 127.0.0.1.
type PKI struct {
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	Pool *x509.CertPool
}

var serial atomic.Int64

// NewPKI makes a CA named name.
func NewPKI(tb testing.TB, name string) *PKI {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	ca, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	return &PKI{ca: ca, key: key, Pool: pool}
}

// Cert signs a certificate for the node cn at 127.0.0.1, for both server and client use: it
// names the node as the mesh expects (transport.NodeURI).
func (p *PKI) Cert(tb testing.TB, cn string) tls.Certificate {
	tb.Helper()
	return p.CertFor(tb, cn, transport.NodeURI(sdk.NodeID(cn)))
}

// CertFor signs a certificate with common name cn and the URI SANs uris (none: a certificate
// that names no node).
func (p *PKI) CertFor(tb testing.TB, cn string, uris ...*url.URL) tls.Certificate {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial.Add(1)), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		URIs:        uris,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		tb.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// MutualTLS returns a node's server and client TLS configurations under p: it presents its
// certificate both ways and requires the peer's, signed by p.
func (p *PKI) MutualTLS(tb testing.TB, node string) (server, client *tls.Config) {
	c := p.Cert(tb, node)
	server = &tls.Config{Certificates: []tls.Certificate{c}, ClientCAs: p.Pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS13}
	client = &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: p.Pool, MinVersion: tls.VersionTLS13}
	return server, client
}

// Files writes, into dir, the certificate and key of cn (Cert) and the CA's certificate as PEM
// files, for servers such as etcd that read them from disk.
func (p *PKI) Files(tb testing.TB, cn, dir string) (certFile, keyFile, caFile string) {
	tb.Helper()
	c := p.Cert(tb, cn)
	keyDER, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		tb.Fatal(err)
	}
	certFile, keyFile, caFile = filepath.Join(dir, cn+".crt"), filepath.Join(dir, cn+".key"), filepath.Join(dir, "ca.crt")
	for path, block := range map[string]*pem.Block{
		certFile: {Type: "CERTIFICATE", Bytes: c.Certificate[0]},
		keyFile:  {Type: "PRIVATE KEY", Bytes: keyDER},
		caFile:   {Type: "CERTIFICATE", Bytes: p.ca.Raw},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return certFile, keyFile, caFile
}

// ClientTLS returns a client configuration that presents cn's certificate and trusts p.
func (p *PKI) ClientTLS(tb testing.TB, cn string) *tls.Config {
	tb.Helper()
	return &tls.Config{Certificates: []tls.Certificate{p.Cert(tb, cn)}, RootCAs: p.Pool, MinVersion: tls.VersionTLS13}
}
