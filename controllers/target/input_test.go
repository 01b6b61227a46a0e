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

package target

import (
	"testing"
	"time"

	"k8s.io/utils/ptr"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/plan"
)

func TestInputCarriesTheAffinity(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec *tailcutv1alpha1.Affinity
		want *plan.Affinity
	}{
		{"none", nil, nil},
		{"a header, defaults", &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Header: "x-cache-key"}},
			&plan.Affinity{HashOn: plan.HashOnHeader, Name: "x-cache-key", LoadBalancer: plan.LoadBalancerRingHash, RingSize: 1024}},
		{"a cookie on a larger ring", &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Cookie: "session"}, RingSize: ptr.To[int32](4096)},
			&plan.Affinity{HashOn: plan.HashOnCookie, Name: "session", LoadBalancer: plan.LoadBalancerRingHash, RingSize: 4096}},
		{"a query parameter, Maglev's default table", &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{QueryParameter: "key"}, LoadBalancer: tailcutv1alpha1.LoadBalancerMaglev},
			&plan.Affinity{HashOn: plan.HashOnQueryParameter, Name: "key", LoadBalancer: plan.LoadBalancerMaglev, TableSize: 65537}},
		{"the path, a Maglev table", &tailcutv1alpha1.Affinity{HashOn: tailcutv1alpha1.HashOn{Path: true}, LoadBalancer: tailcutv1alpha1.LoadBalancerMaglev, TableSize: ptr.To[int32](251)},
			&plan.Affinity{HashOn: plan.HashOnPath, LoadBalancer: plan.LoadBalancerMaglev, TableSize: 251}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := policy("cache", time.Now(), "cache", 80)
			p.Spec.Affinity = tc.spec
			in := Input(p, 20*time.Millisecond, []plan.Endpoint{{Address: "10.0.0.1", Port: 8080}})
			got, err := plan.Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if (got.Affinity == nil) != (tc.want == nil) || got.Affinity != nil && *got.Affinity != *tc.want {
				t.Errorf("affinity = %+v, want %+v", got.Affinity, tc.want)
			}
		})
	}
}
