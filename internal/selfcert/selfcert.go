// Package selfcert makes the throwaway TLS identities of gorun's own
// channels (the srun connect-back, the per-node endpoint, the job socket):
// a fresh Ed25519 key (cheap to make: no curve tables to build in a fresh
// process, unlike P-256) and a self-signed certificate that nobody checks
// but by its fingerprint, which the peer learns through a channel it
// already trusts.
//
// It also holds the two ways those channels check a peer, so that they
// are written once: the dialer pins the peer's certificate by its
// fingerprint ([PinnedConfig]), and a party proves that it holds the
// job's key with an HMAC bound to the TLS session ([Proof], [EKM]).
// Both ends speak TLS 1.3 only ([ServerConfig], [ProofConfig]).
package selfcert

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"time"
)

// New returns a certificate named name, with its key, and the hex
// SHA-256 fingerprint of its DER encoding.
func New(name string) (tls.Certificate, string, error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("%s key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("%s certificate: %w", name, err)
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(366 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pub, key)
	if err != nil {
		return tls.Certificate{}, "", fmt.Errorf("%s certificate: %w", name, err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, Fingerprint(der), nil
}

// Fingerprint is the hex SHA-256 of a certificate's DER encoding.
func Fingerprint(der []byte) string {
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:])
}
