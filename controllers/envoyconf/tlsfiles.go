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

import "errors"

// TLSFiles name the PEM files of mutual TLS on the xDS connection: this
// side's certificate and key, and the CA that signs the other side's. The
// layout of a cert-manager Certificate's Secret (tls.crt, tls.key, ca.crt)
// mounted as a volume fits as is.
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
}

// Enabled says whether any file is named.
func (f TLSFiles) Enabled() bool { return f.CertFile != "" || f.KeyFile != "" || f.CAFile != "" }

// Check says what is missing when not all three files are named.
func (f TLSFiles) Check() error {
	if f.CertFile == "" || f.KeyFile == "" || f.CAFile == "" {
		return errors.New("xDS TLS needs a certificate, its key and the CA of the other side, all three")
	}
	return nil
}
