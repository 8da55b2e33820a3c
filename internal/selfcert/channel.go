package selfcert

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"encoding/hex"
)

// ServerConfig is the TLS configuration of a channel's serving side, which
// shows cert: TLS 1.3 only, and no session tickets (no client of gorun's
// resumes a session, and would only read them).
func ServerConfig(cert tls.Certificate) *tls.Config {
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, SessionTicketsDisabled: true}
}

// PinnedConfig is the TLS configuration of a channel's dialing side that
// takes the peer whose certificate has the fingerprint pin (hex SHA-256
// of its DER encoding, as New and Fingerprint give it) and no other: no
// CA, no name, the fingerprints compared in constant time. wrong makes
// the handshake's error for a peer that showed another certificate (got
// is its fingerprint) or none (got is "").
func PinnedConfig(pin string, wrong func(got string) error) *tls.Config {
	want, _ := hex.DecodeString(pin) // a bad pin matches nothing
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The pin below is the whole verification.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return wrong("")
			}
			sum := sha256.Sum256(cs.PeerCertificates[0].Raw)
			if len(want) != len(sum) || subtle.ConstantTimeCompare(sum[:], want) != 1 {
				return wrong(hex.EncodeToString(sum[:]))
			}
			return nil
		},
	}
}

// ProofConfig is the TLS configuration of a channel's dialing side whose
// peer makes its certificate on the spot, so that there is nothing to
// pin: TLS 1.3, the certificate unchecked. The peer must prove itself
// after the handshake, with a Proof bound to the session, before the
// dialer says anything of its own.
func ProofConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
}

// EKM returns the keying material that binds a Proof to the TLS session
// of cs: 32 bytes that the session exports under label (RFC 8446 7.5),
// which both sides of the session compute and nobody else can.
func EKM(cs tls.ConnectionState, label string) ([]byte, error) {
	return cs.ExportKeyingMaterial(label, nil, 32)
}

// Proof is a party's proof that it holds key: HMAC-SHA256 over what (the
// party, its channel and version, so that one party's proof is not
// another's) and ekm (EKM), so that it is worth nothing on another TLS
// session: it can be neither relayed nor reflected.
func Proof(key []byte, what string, ekm []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(what))
	m.Write(ekm)
	return m.Sum(nil)
}

// ProofHolds reports whether proof is Proof(key, what, ekm), compared in
// constant time.
func ProofHolds(proof, key []byte, what string, ekm []byte) bool {
	return hmac.Equal(proof, Proof(key, what, ekm))
}
