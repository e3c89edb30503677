package transport

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/zlink-go/zlink/sdk"
)

// A node's certificate names the node in a URI SAN: zlink://node/<node ID>, the ID escaped as
// a URL path. Under TLS each side checks that the certificate of the other names the node it
// claims to be (the server) or says it is (the client, in the zlink-node header): a certificate
// from the mesh's CA lets a node be itself, not any node.

// NodeURI is the URI SAN that names node in its certificate.
func NodeURI(node sdk.NodeID) *url.URL {
	return &url.URL{Scheme: "zlink", Host: "node", Path: "/" + string(node)}
}

// certNode returns the node a certificate names, if it names one.
func certNode(cert *x509.Certificate) (sdk.NodeID, bool) {
	for _, u := range cert.URIs {
		if u.Scheme == "zlink" && u.Host == "node" && len(u.Path) > 1 {
			return sdk.NodeID(strings.TrimPrefix(u.Path, "/")), true
		}
	}
	return "", false
}

// peerIdentity is what TLS says of the other end of ctx's connection: whether TLS is used,
// and the node its verified certificate names ("" when it presented none that was verified).
func peerIdentity(ctx context.Context) (tls bool, node sdk.NodeID, err error) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return false, "", nil
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return false, "", nil
	}
	if len(info.State.VerifiedChains) == 0 || len(info.State.PeerCertificates) == 0 {
		return true, "", nil
	}
	id, ok := certNode(info.State.PeerCertificates[0])
	if !ok {
		return true, "", fmt.Errorf("the peer's certificate names no node: it needs the URI SAN zlink://node/<node ID>")
	}
	return true, id, nil
}

// remoteAddr is the address of the other end of ctx's connection, "" when unknown.
func remoteAddr(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		return p.Addr.String()
	}
	return ""
}
