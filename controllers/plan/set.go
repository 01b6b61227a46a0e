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

package plan

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Errors of a plan set: plans that are valid alone but cannot share one proxy.
var (
	// ErrDuplicateName: two plans carry the same Name (the same policy twice).
	ErrDuplicateName = errors.New("two plans have the same name")
	// ErrDuplicateTarget: two policies target the same Service port. Envoy can
	// route a host name to one virtual host only, so one of them must go.
	ErrDuplicateTarget = errors.New("two policies target the same service port")
)

// HTTPDefaultPort is the port an HTTP client leaves out of the Host header. A
// portless host name shared by several ports of one Service goes to this port
// when the Service has it (see PrepareSet).
const HTTPDefaultPort = 80

// ComparePlans orders plans by namespace, service, port and name: the order in
// which publishers render virtual hosts and clusters, so that output is
// deterministic whatever order the plans arrived in.
func ComparePlans(a, b RoutePlan) int {
	return cmp.Or(
		cmp.Compare(a.Namespace, b.Namespace),
		cmp.Compare(a.Service, b.Service),
		cmp.Compare(a.Port, b.Port),
		cmp.Compare(a.Name, b.Name),
	)
}

// PrepareSet readies the plans that one proxy serves together: it sorts them
// with ComparePlans and makes sure each host name belongs to one plan only.
// Each plan was validated where it was built (Build); what PrepareSet checks
// is the set. The input slice and its plans are not modified.
//
// Host names: ServiceHosts lists every name with and without the port, so the
// portless names ("web.shop", "web.shop.svc", ...) of a Service with two hedged ports
// appear in both plans. A client that leaves the port out of the Host header
// means port 80, so the portless name stays with the port-80 plan; when no plan
// has port 80 it stays with the first plan in order (the lowest port). The other
// plans keep their names with the port. A plan left with no host name at all is
// an error (ErrNoHosts).
//
// Two plans for the same namespace, Service and port are an error
// (ErrDuplicateTarget): Envoy could reach only one of them.
func PrepareSet(plans []RoutePlan) ([]RoutePlan, error) {
	out := slices.Clone(plans)
	var errs []error
	slices.SortFunc(out, ComparePlans)
	for i := 1; i < len(out); i++ {
		a, b := out[i-1], out[i]
		if a.Name == b.Name {
			errs = append(errs, fmt.Errorf("%w: %s", ErrDuplicateName, a.Name))
		}
		if a.Namespace == b.Namespace && a.Service == b.Service && a.Port == b.Port {
			errs = append(errs, fmt.Errorf("%w: %s and %s both target %s/%s port %d",
				ErrDuplicateTarget, a.Name, b.Name, a.Namespace, a.Service, a.Port))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}

	owner := map[string]int{}
	for i, p := range out {
		for _, h := range p.Hosts {
			j, taken := owner[h]
			if !taken || (p.Port == HTTPDefaultPort && out[j].Port != HTTPDefaultPort) {
				owner[h] = i
			}
		}
	}
	for i := range out {
		var hosts []string
		for _, h := range out[i].Hosts {
			if owner[h] == i {
				hosts = append(hosts, h)
			}
		}
		if len(hosts) == 0 {
			errs = append(errs, fmt.Errorf("plan %s: %w: every host name belongs to another plan", out[i].Name, ErrNoHosts))
		}
		out[i].Hosts = hosts
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}
