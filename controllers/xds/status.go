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
	"fmt"
	"maps"
	"slices"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/publish"
)

// Status reports how far connected proxies took the current snapshot. All
// policies share one snapshot, so the version and counts are the same for every
// policy the server holds; a policy it does not hold gets Connected only.
//
// A proxy is Programmed when it ACKed the current version of every resource
// type of the snapshot. Rejected holds the first (by node id) NACK of the
// current version, as "<node> rejected <type>: <Envoy's error detail>".
func (s *Server) Status(key k8stypes.NamespacedName) publish.ProgramStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	ps := publish.ProgramStatus{Connected: int32(len(s.streams))}
	if _, ok := s.plans[key]; !ok || s.version == "" {
		return ps
	}
	ps.Version = s.version
	var rejected []string
	for _, st := range s.streams {
		programmed := true
		for _, typ := range s.expected {
			if st.acked[typ] != s.versions[typ] {
				programmed = false
			}
		}
		if programmed {
			ps.Programmed++
		}
		for _, typ := range slices.Sorted(maps.Keys(st.nacked)) {
			if n := st.nacked[typ]; n.version == s.versions[typ] {
				rejected = append(rejected, fmt.Sprintf("%s rejected %s: %s", st.node, shortType(typ), n.detail))
			}
		}
	}
	if len(rejected) > 0 {
		slices.Sort(rejected)
		ps.Rejected = rejected[0]
	}
	return ps
}
