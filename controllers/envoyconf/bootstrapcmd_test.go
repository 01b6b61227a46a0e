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
	"strings"
	"testing"
)

func TestBootstrapCommand(t *testing.T) {
	var out strings.Builder
	if err := BootstrapCommand([]string{"--xds-address", "tailcut.tailcut-system.svc:18000", "--node-id", "n1", "--admin-port", "9902"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"id: n1", "port_value: 9902", "address: tailcut.tailcut-system.svc", "type: STRICT_DNS", "http2_protocol_options", "upstream_rq_time"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("bootstrap lacks %q", want)
		}
	}
	if err := BootstrapCommand([]string{"--node-id", "n1"}, &out); err == nil {
		t.Error("missing --xds-address should fail")
	}
	if err := BootstrapCommand([]string{"--xds-address", "nohostport"}, &out); err == nil {
		t.Error("an address without a port should fail")
	}
}
