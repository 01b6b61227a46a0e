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
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	resourcev3 "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/tailcut/tailcut/controllers/plan"
)

// fragment is one plan's own resources: its virtual host, its hedged and
// bypass clusters and their endpoints, validated, with a content hash per
// resource type.
type fragment struct {
	plan      plan.RoutePlan // the prepared plan it was translated from
	vhost     *routev3.VirtualHost
	clusters  []*clusterv3.Cluster
	endpoints []*endpointv3.ClusterLoadAssignment
	hash      policyHash
	mutated   bool
}

func translatePlan(p plan.RoutePlan, mutate func(*routev3.VirtualHost)) (*fragment, error) {
	translationsTotal.Inc()
	f := &fragment{plan: p.DeepCopy(), vhost: virtualHost(p), mutated: mutate != nil}
	if mutate != nil {
		mutate(f.vhost)
	}
	for _, name := range []string{plan.ClusterName(p.Namespace, p.Service, p.Port), plan.BypassClusterName(p.Namespace, p.Service, p.Port)} {
		f.clusters = append(f.clusters, cluster(name, p.Budget))
		f.endpoints = append(f.endpoints, loadAssignment(name, p.Endpoints))
	}
	byType := map[string][]validator{resourcev3.RouteType: {f.vhost}}
	for i := range f.clusters {
		byType[resourcev3.ClusterType] = append(byType[resourcev3.ClusterType], f.clusters[i])
		byType[resourcev3.EndpointType] = append(byType[resourcev3.EndpointType], f.endpoints[i])
	}
	f.hash = policyHash{byType: map[string]string{}}
	h := sha256.New()
	for _, typ := range policyTypes {
		for _, m := range byType[typ] {
			if err := m.ValidateAll(); err != nil {
				return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().Name(), err)
			}
		}
		v, err := hashOf(byType[typ])
		if err != nil {
			return nil, err
		}
		f.hash.byType[typ] = v
		h.Write([]byte(v))
	}
	f.hash.version = hex.EncodeToString(h.Sum(nil))[:16]
	return f, nil
}

// translator translates plan sets, keeping each plan's fragment until the plan
// changes: publishing one policy's change among a thousand translates, validates
// and hashes that one policy's resources, and only assembles the others'.
type translator struct {
	opts      TranslateOptions
	shared    *shared
	fragments map[string]*fragment // by plan name: the last set translated, and plans admitted since
	// mutated counts the fragments made with mutateVirtualHost.
	mutated int
	// mutateVirtualHost, when a test sets it, edits every virtual host before
	// validation; fragments made with it are never reused.
	mutateVirtualHost func(*routev3.VirtualHost)
}

func newTranslator(opts TranslateOptions) *translator {
	return &translator{opts: opts.withDefaults(), fragments: map[string]*fragment{}}
}

// translate renders the set, reusing the fragment of every plan that did not
// change since the last set.
func (t *translator) translate(plans []plan.RoutePlan) (*Resources, error) {
	prepared, err := plan.PrepareSet(plans)
	if err != nil {
		return nil, err
	}
	if t.shared == nil {
		if t.shared, err = newShared(t.opts); err != nil {
			return nil, err
		}
	}
	frags := make([]*fragment, 0, len(prepared))
	fresh := make(map[string]*fragment, len(prepared))
	mutated := 0
	for _, p := range prepared {
		f := t.fragments[p.Name]
		if f == nil || f.mutated || t.mutateVirtualHost != nil || !reflect.DeepEqual(f.plan, p) {
			if f, err = translatePlan(p, t.mutateVirtualHost); err != nil {
				return nil, fmt.Errorf("plan %s: %w", p.Name, err)
			}
		}
		frags = append(frags, f)
		fresh[p.Name] = f
		if f.mutated {
			mutated++
		}
	}
	t.fragments, t.mutated = fresh, mutated
	return assemble(t.shared, frags)
}

// admit translates one plan, as it would be in a set, and keeps its fragment
// for the next translation: the plan's own errors show before the set is
// translated.
func (t *translator) admit(p plan.RoutePlan) error {
	if f := t.fragments[p.Name]; f != nil && !f.mutated && t.mutateVirtualHost == nil && reflect.DeepEqual(f.plan, p) {
		return nil
	}
	f, err := translatePlan(p, t.mutateVirtualHost)
	if err != nil {
		return fmt.Errorf("plan %s: %w", p.Name, err)
	}
	if old := t.fragments[p.Name]; old != nil && old.mutated {
		t.mutated--
	}
	if f.mutated {
		t.mutated++
	}
	t.fragments[p.Name] = f
	return nil
}

// pure says whether the last set, and the next, are plain translations of
// their plans: the same plan set then gives the same resources.
func (t *translator) pure() bool {
	return t.mutateVirtualHost == nil && t.mutated == 0
}
