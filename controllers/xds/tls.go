/*
Copyright 2026 The tailcut Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package xds

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/tailcut/tailcut/controllers/envoyconf"
)

// ServerTLS is the xDS server's TLS configuration: only a client with a
// certificate the CA signed completes the handshake, so no other pod can
// open an ADS stream, take every route or count as a proxy in status.
// Files are read again at every handshake, so a renewed Secret takes
// effect without a restart.
func ServerTLS(f envoyconf.TLSFiles) (*tls.Config, error) {
	if err := f.Check(); err != nil {
		return nil, err
	}
	load := func() (*tls.Certificate, *x509.CertPool, error) {
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("xDS server certificate: %w", err)
		}
		ca, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("xDS client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, nil, fmt.Errorf("xDS client CA %s holds no PEM certificate", f.CAFile)
		}
		return &cert, pool, nil
	}
	if _, _, err := load(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			cert, pool, err := load()
			if err != nil {
				return nil, err
			}
			return &tls.Config{
				MinVersion:   tls.VersionTLS12,
				Certificates: []tls.Certificate{*cert},
				ClientCAs:    pool,
				ClientAuth:   tls.RequireAndVerifyClientCert,
				NextProtos:   []string{"h2"},
			}, nil
		},
	}, nil
}
