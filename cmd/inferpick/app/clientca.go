package app

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
)

// clientCAs holds the CA pool that client certificates of the ext_proc
// server must chain to, read from a PEM file and read again when the file
// changes (a mounted Secret is swapped, not edited: polling sees both).
type clientCAs struct {
	path     string
	interval time.Duration
	log      logr.Logger
	pem      []byte
	pool     atomic.Pointer[x509.CertPool]
}

func newClientCAs(path string, interval time.Duration, log logr.Logger) (*clientCAs, error) {
	c := &clientCAs{path: path, interval: interval, log: log}
	if err := c.load(); err != nil {
		return nil, err
	}
	return c, nil
}

// load reads the file; a file that did not change is not parsed again.
func (c *clientCAs) load() error {
	b, err := os.ReadFile(c.path)
	if err != nil {
		return fmt.Errorf("read client CAs: %w", err)
	}
	if bytes.Equal(b, c.pem) {
		return nil
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return fmt.Errorf("client CAs %s: no PEM certificate in the file", c.path)
	}
	c.pem = b
	c.pool.Store(pool)
	return nil
}

// require makes cfg demand a client certificate from the current pool.
func (c *clientCAs) require(cfg *tls.Config) {
	base := cfg.Clone()
	base.ClientAuth = tls.RequireAndVerifyClientCert
	cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
		next := base.Clone()
		next.ClientCAs = c.pool.Load()
		return next, nil
	}
}

// Start polls the file until ctx ends. A file that cannot be read or parsed
// keeps the pool in use and is logged.
func (c *clientCAs) Start(ctx context.Context) error {
	t := time.NewTicker(c.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := c.load(); err != nil {
				c.log.Error(err, "Keeping the client CAs in use", "path", c.path)
			}
		}
	}
}

// NeedLeaderElection is false: every replica serves.
func (c *clientCAs) NeedLeaderElection() bool { return false }
