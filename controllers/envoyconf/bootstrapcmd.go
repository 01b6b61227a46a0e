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

package envoyconf

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// BootstrapCommand is 'tailcut bootstrap': it parses args (without the command
// name) and writes the bootstrap YAML to out. Flags:
//
//	--xds-address host:port   tailcut's xDS server (required)
//	--node-id id              the proxy's node id (default: the host name)
//	--node-cluster name       node.cluster (default tailcut)
//	--admin-address ip        Envoy admin address (default 127.0.0.1)
//	--admin-port n            Envoy admin port (default 9901)
//	--xds-tls-cert, --xds-tls-key, --xds-tls-ca path
//	                          mutual TLS to the xDS server: this proxy's certificate and key, the CA of the server's
//	--stats-port n            serve only /stats/prometheus and /ready on this port (0.0.0.0), so the admin interface can stay on loopback (default: none)
//	--listener-port n         the listener port tailcut programs, for the node metadata (default 10000)
//	--output path             write to this file instead of out
func BootstrapCommand(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("bootstrap", flag.ContinueOnError)
	fs.SetOutput(out)
	hostname, _ := os.Hostname()
	var (
		opts       BootstrapOptions
		adminPort  uint
		listenPort uint
		statsPort  uint
		output     string
		module     string
	)
	fs.StringVar(&opts.XDSAddress, "xds-address", "", "host:port of tailcut's xDS server (required)")
	fs.StringVar(&opts.NodeID, "node-id", hostname, "node id of this proxy")
	fs.StringVar(&opts.NodeCluster, "node-cluster", DefaultNodeCluster, "node cluster of this proxy")
	fs.StringVar(&opts.AdminAddress, "admin-address", DefaultAdminAddress, "address of Envoy's admin interface")
	fs.UintVar(&adminPort, "admin-port", DefaultAdminPort, "port of Envoy's admin interface")
	fs.StringVar(&opts.TLS.CertFile, "xds-tls-cert", "", "this proxy's certificate (PEM) for mutual TLS to the xDS server")
	fs.StringVar(&opts.TLS.KeyFile, "xds-tls-key", "", "the key of --xds-tls-cert")
	fs.StringVar(&opts.TLS.CAFile, "xds-tls-ca", "", "the CA (PEM) that signs the xDS server's certificate")
	fs.UintVar(&statsPort, "stats-port", 0, "port of a listener that serves only /stats/prometheus and /ready from the admin interface (0: none)")
	fs.UintVar(&listenPort, "listener-port", DefaultListenerPort, "port of the HTTP listener tailcut programs (recorded in the node metadata)")
	fs.StringVar(&output, "output", "", "write the bootstrap to this file instead of standard output")
	fs.StringVar(&module, "hedge-account-module", "", "copy the hedge account's Proxy-Wasm module from this file to hedge-account.wasm beside --output, where the operator's --envoy-hedge-account-module points by default (the operator image has it at /hedge-account.wasm)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("bootstrap: unexpected arguments %q", fs.Args())
	}
	if opts.XDSAddress == "" {
		return errors.New("bootstrap: --xds-address is required")
	}
	if adminPort == 0 || adminPort > 65535 || listenPort > 65535 || statsPort > 65535 {
		return errors.New("bootstrap: ports must be between 1 and 65535")
	}
	opts.AdminPort, opts.ListenerPort, opts.StatsPort = uint32(adminPort), uint32(listenPort), uint32(statsPort)
	b, err := Bootstrap(opts)
	if err != nil {
		return err
	}
	if module != "" {
		if output == "" {
			return errors.New("bootstrap: --hedge-account-module needs --output (the module goes beside it)")
		}
		if err := copyFile(module, filepath.Join(filepath.Dir(output), filepath.Base(DefaultHedgeAccountModule))); err != nil {
			return fmt.Errorf("bootstrap: the hedge account module: %w", err)
		}
	}
	if output != "" {
		return os.WriteFile(output, b, 0o644)
	}
	_, err = out.Write(b)
	return err
}

// copyFile copies src to dst, readable by the proxy.
func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}
