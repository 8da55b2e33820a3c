package selfcert

import (
	"crypto/x509"
	"testing"
)

// Two identities differ, and the fingerprint is the certificate's.
func TestNew(t *testing.T) {
	a, fa, err := New("gorun test")
	if err != nil {
		t.Fatal(err)
	}
	_, fb, err := New("gorun test")
	if err != nil {
		t.Fatal(err)
	}
	if fa == fb || len(fa) != 64 {
		t.Errorf("fingerprints %q %q", fa, fb)
	}
	c, err := x509.ParseCertificate(a.Certificate[0])
	if err != nil || c.Subject.CommonName != "gorun test" || Fingerprint(a.Certificate[0]) != fa {
		t.Errorf("certificate %v, %v", c.Subject, err)
	}
}
