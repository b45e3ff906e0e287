package app

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// serverTLS returns the ext_proc TLS configuration: the certificate in
// certPath (watched, so a rotated Secret takes effect without a restart), or
// a self-signed one made at start.
func serverTLS(certPath string) (*tls.Config, *certwatcher.CertWatcher, error) {
	if certPath != "" {
		w, err := certwatcher.New(filepath.Join(certPath, "tls.crt"), filepath.Join(certPath, "tls.key"))
		if err != nil {
			return nil, nil, fmt.Errorf("load certificate from %s: %w", certPath, err)
		}
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}, w, nil
	}
	cert, err := selfSigned(time.Now())
	if err != nil {
		return nil, nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}, nil, nil
}

func selfSigned(now time.Time) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("generate serial: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"inferpick"}, CommonName: "inferpick"},
		DNSNames:              []string{"inferpick", "localhost"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-sign certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
