package reliability

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/inferpick/inferpick/test/gateway"
)

// TestClientCannotChooseDestination sends requests carrying the
// picker-owned headers, pointing at a server outside the pool. None of
// them reaches it; every destination the picker returns is in its registry.
func TestClientCannotChooseDestination(t *testing.T) {
	a, b := startSim(t, "127.0.0.52", 0), startSim(t, "127.0.0.53", 0)
	outsider := startSim(t, "127.0.0.54", 0)
	p := startPicker(t, "--static-endpoints", a.addr+","+b.addr, "--fallbacks", "1")
	p.WaitWorkers(t, 2)

	// A gateway routes on the envoy.lb metadata first, or (an ORIGINAL_DST
	// cluster) on the destination header alone: the picker must own both.
	for name, opts := range map[string][]gateway.Option{
		"metadata first": nil,
		"header only":    {gateway.WithHeaderRouting()},
	} {
		t.Run(name, func(t *testing.T) {
			g := startGateway(t, p.Addr(), opts...)
			r := mrand.New(mrand.NewPCG(7, 7))
			const n = 40
			for i := range n {
				h := http.Header{"X-Gateway-Destination-Endpoint": {outsider.addr}}
				if i%2 == 0 {
					h.Set("X-Gateway-Destination-Endpoint-Served", outsider.addr)
				}
				resp, err := g.Post(t.Context(), "/v1/completions", completion(randomPrompt(r, 4), 4, i%3 == 0), h)
				if err != nil {
					t.Fatal(err)
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Errorf("request %d: status %d", i, resp.StatusCode)
				}
			}
			st, err := outsider.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if st.Requests != 0 {
				t.Errorf("the server a client named got %d requests", st.Requests)
			}
			pool := []string{a.addr, b.addr}
			for _, rec := range g.WaitRecords(t, n) {
				for _, ep := range append(slices.Clone(rec.Endpoints), rec.Served) {
					if !slices.Contains(pool, ep) {
						t.Errorf("destination %q is not in the pool %v (record %+v)", ep, pool, rec.Record)
					}
				}
			}
			p.WaitIdle(t, 30*time.Second)
			checkReleases(t, p)
		})
	}
}

// TestExtProcTLS serves ext_proc over TLS, first with the self-signed
// certificate made at start, then with a certificate from --cert-path that
// the gateway verifies against its CA. A gateway that does not trust the
// certificate, or speaks plain gRPC, gets no routing.
func TestExtProcTLS(t *testing.T) {
	s := startSim(t, "127.0.0.55", 0)

	t.Run("self-signed", func(t *testing.T) {
		p := startPicker(t, "--static-endpoints", s.addr, "--secure-serving=true")
		p.WaitWorkers(t, 1)
		insecureTLS, _ := gateway.TLSConfig("", true)
		expectRouted(t, startGateway(t, p.Addr(), gateway.WithPickerTLS(insecureTLS)), true)
		verifying, _ := gateway.TLSConfig("", false) // system roots: the self-signed cert is not trusted
		expectRouted(t, startGateway(t, p.Addr(), gateway.WithPickerTLS(verifying)), false)
		expectRouted(t, startGateway(t, p.Addr()), false)
		p.WaitIdle(t, 30*time.Second)
	})

	t.Run("provided certificate", func(t *testing.T) {
		dir := t.TempDir()
		caFile := writeCertificates(t, dir)
		p := startPicker(t, "--static-endpoints", s.addr, "--secure-serving=true", "--cert-path", dir)
		p.WaitWorkers(t, 1)
		trusting, err := gateway.TLSConfig(caFile, false)
		if err != nil {
			t.Fatal(err)
		}
		expectRouted(t, startGateway(t, p.Addr(), gateway.WithPickerTLS(trusting)), true)
		otherCA := writeCertificates(t, t.TempDir())
		distrusting, _ := gateway.TLSConfig(otherCA, false)
		expectRouted(t, startGateway(t, p.Addr(), gateway.WithPickerTLS(distrusting)), false)
		p.WaitIdle(t, 30*time.Second)
	})
}

// expectRouted sends one request and checks whether the picker routed it.
func expectRouted(t *testing.T, g *gw, routed bool) {
	t.Helper()
	code, body, err := g.Complete(t.Context(), completion("hello", 2, false))
	if err != nil {
		t.Fatal(err)
	}
	rec := g.WaitRecords(t, 1)[0]
	if got := len(rec.Endpoints) > 0 && code == http.StatusOK; got != routed {
		t.Errorf("routed = %v (status %d, processing error %v), want %v: %s", got, code, rec.ProcessingError, routed, body)
	}
}

// writeCertificates writes a new CA and a serving certificate for
// 127.0.0.1 signed by it: tls.crt and tls.key in dir, the CA in ca.crt,
// whose path it returns.
func writeCertificates(t *testing.T, dir string) string {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "reliability test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "inferpick"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	for name, block := range map[string]*pem.Block{
		"tls.crt": {Type: "CERTIFICATE", Bytes: der},
		"tls.key": {Type: "EC PRIVATE KEY", Bytes: keyDER},
		"ca.crt":  {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The pair must load the way the picker loads it.
	if _, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "ca.crt")
}
