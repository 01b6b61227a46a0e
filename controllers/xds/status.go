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

	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/publish"
)

// Status reports how far connected proxies took the policy's configuration.
// A proxy serves the policy while the versions it ACKed hold some version of
// the policy's own resources, and runs the current one when they hold the
// current; changes to other policies do not matter. Rejected holds the first
// (by node id) NACK of a version that changed this policy, as "<node> rejected
// <type>: <Envoy's error detail>".
func (s *Server) Status(key k8stypes.NamespacedName) publish.ProgramStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.statusLocked(key)
}

// Statuses is the Status of every policy this server holds: what this
// replica reports for the leader to count (package replicas).
func (s *Server) Statuses() map[k8stypes.NamespacedName]publish.ProgramStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[k8stypes.NamespacedName]publish.ProgramStatus, len(s.plans))
	for key := range s.plans {
		out[key] = s.statusLocked(key)
	}
	return out
}

func (s *Server) statusLocked(key k8stypes.NamespacedName) publish.ProgramStatus {
	ps := publish.ProgramStatus{Connected: int32(len(s.streams))}
	cur, ok := s.policies[key]
	if _, planned := s.plans[key]; !ok || !planned || s.version == "" {
		return ps
	}
	ps.Version = cur.Version
	var rejected []string
	for _, st := range s.streams {
		serving, current := st.acked[resourcev3.ListenerType] != "", st.acked[resourcev3.ListenerType] != ""
		for _, typ := range envoyconf.PolicyTypes {
			got := s.hashIn(typ, st.acked[typ], key)
			serving = serving && got != ""
			current = current && got == cur.ByType[typ]
		}
		if serving {
			ps.Serving++
		}
		if current {
			ps.Programmed++
		}
		for _, typ := range slices.Sorted(maps.Keys(st.nacked)) {
			n := st.nacked[typ]
			if n.version == s.versions[typ] && s.hashIn(typ, n.version, key) != s.hashIn(typ, st.acked[typ], key) {
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

// historyLength is how many recent versions of each type the server remembers,
// enough for any proxy that is still catching up.
const historyLength = 32

// typeVersion is which policy resources one version of a type held.
type typeVersion struct {
	version string
	hashes  map[k8stypes.NamespacedName]string
}

// remember records which policy resources the new type versions hold. A
// version is a hash of the resources, so the same version can come back with
// other owners: a policy that takes over a Service port from a deleted one
// gets the same clusters and endpoints, named after the port. The newest
// record of a version says who owns it now. Callers hold mu.
func (s *Server) remember(versions map[string]string, hashes map[k8stypes.NamespacedName]envoyconf.PolicyHash) {
	if s.history == nil {
		s.history = map[string][]typeVersion{}
	}
	for _, typ := range envoyconf.PolicyTypes {
		tv := typeVersion{version: versions[typ], hashes: map[k8stypes.NamespacedName]string{}}
		for key, ph := range hashes {
			tv.hashes[key] = ph.ByType[typ]
		}
		h := s.history[typ]
		if len(h) > 0 && h[len(h)-1].version == versions[typ] {
			h[len(h)-1] = tv
			continue
		}
		h = append(h, tv)
		if len(h) > historyLength {
			h = h[len(h)-historyLength:]
		}
		s.history[typ] = h
	}
}

// hashIn is the policy's resources' hash in a version of a type, by its
// newest record, "" when the version is unknown or did not hold the policy.
// Callers hold mu.
func (s *Server) hashIn(typ, version string, key k8stypes.NamespacedName) string {
	h := s.history[typ]
	for i := len(h) - 1; i >= 0; i-- {
		if h[i].version == version {
			return h[i].hashes[key]
		}
	}
	return ""
}
