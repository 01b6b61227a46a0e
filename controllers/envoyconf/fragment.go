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
	hash      PolicyHash
	mutated   bool
}

// PolicyTypes are the resource types a policy owns resources of: its virtual
// host (RDS), its two clusters (CDS) and their endpoints (EDS). The listener
// is shared.
var PolicyTypes = []string{resourcev3.RouteType, resourcev3.ClusterType, resourcev3.EndpointType}

// PolicyHash is one policy's resources in one translation: a hash per type
// (PolicyTypes), and a version over all of them. The xDS server tells by it
// which policies a proxy's ACK or NACK concerns.
type PolicyHash struct {
	ByType  map[string]string
	Version string
}

// Counter is what the translator counts its work with (a Prometheus
// counter, for one).
type Counter interface{ Inc() }

// TranslatorCounters count the translator's work; nil counters count nothing.
type TranslatorCounters struct {
	// Translations counts plans translated into resources.
	Translations Counter
	// Assemblies counts plan sets assembled into one configuration.
	Assemblies Counter
}

func inc(c Counter) {
	if c != nil {
		c.Inc()
	}
}

func translatePlan(p plan.RoutePlan, mutate func(*routev3.VirtualHost)) (*fragment, error) {
	f := &fragment{plan: p.DeepCopy(), vhost: virtualHost(p), mutated: mutate != nil}
	if mutate != nil {
		mutate(f.vhost)
	}
	hedged, bypass := plan.ClusterName(p.Namespace, p.Service, p.Port), plan.BypassClusterName(p.Namespace, p.Service, p.Port)
	f.clusters = append(f.clusters, hedgedCluster(hedged, p), cluster(bypass, p))
	f.endpoints = append(f.endpoints, loadAssignment(hedged, p.Endpoints, true), loadAssignment(bypass, p.Endpoints, false))
	byType := map[string][]validator{resourcev3.RouteType: {f.vhost}}
	for i := range f.clusters {
		byType[resourcev3.ClusterType] = append(byType[resourcev3.ClusterType], f.clusters[i])
		byType[resourcev3.EndpointType] = append(byType[resourcev3.EndpointType], f.endpoints[i])
	}
	f.hash = PolicyHash{ByType: map[string]string{}}
	h := sha256.New()
	for _, typ := range PolicyTypes {
		for _, m := range byType[typ] {
			if err := m.ValidateAll(); err != nil {
				return nil, fmt.Errorf("%s: %w", m.ProtoReflect().Descriptor().Name(), err)
			}
		}
		v, err := hashOf(byType[typ])
		if err != nil {
			return nil, err
		}
		f.hash.ByType[typ] = v
		h.Write([]byte(v))
	}
	f.hash.Version = hex.EncodeToString(h.Sum(nil))[:16]
	return f, nil
}

// Translator translates plan sets, keeping each plan's fragment until the plan
// changes: publishing one policy's change among a thousand translates, validates
// and hashes that one policy's resources, and only assembles the others'. It
// is not safe for concurrent use.
type Translator struct {
	opts      TranslateOptions
	counters  TranslatorCounters
	shared    *shared
	fragments map[string]*fragment // by plan name: the last set translated, and plans admitted since
	// mutated counts the fragments made with MutateVirtualHost.
	mutated int
	// MutateVirtualHost, when a test sets it, edits every virtual host before
	// validation; fragments made with it are never reused.
	MutateVirtualHost func(*routev3.VirtualHost)
}

// NewTranslator returns a translator with no fragments yet.
func NewTranslator(opts TranslateOptions, counters TranslatorCounters) *Translator {
	return &Translator{opts: opts.WithDefaults(), counters: counters, fragments: map[string]*fragment{}}
}

// Translate renders the set, reusing the fragment of every plan that did not
// change since the last set.
func (t *Translator) Translate(plans []plan.RoutePlan) (*Resources, error) {
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
		if f == nil || f.mutated || t.MutateVirtualHost != nil || !reflect.DeepEqual(f.plan, p) {
			if f, err = t.translatePlan(p); err != nil {
				return nil, err
			}
		}
		frags = append(frags, f)
		fresh[p.Name] = f
		if f.mutated {
			mutated++
		}
	}
	t.fragments, t.mutated = fresh, mutated
	inc(t.counters.Assemblies)
	return assemble(t.shared, frags)
}

func (t *Translator) translatePlan(p plan.RoutePlan) (*fragment, error) {
	inc(t.counters.Translations)
	f, err := translatePlan(p, t.MutateVirtualHost)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", p.Name, err)
	}
	return f, nil
}

// Admit translates one plan, as it would be in a set, and keeps its fragment
// for the next translation: the plan's own errors show before the set is
// translated.
func (t *Translator) Admit(p plan.RoutePlan) error {
	if f := t.fragments[p.Name]; f != nil && !f.mutated && t.MutateVirtualHost == nil && reflect.DeepEqual(f.plan, p) {
		return nil
	}
	f, err := t.translatePlan(p)
	if err != nil {
		return err
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

// Pure says whether the last set, and the next, are plain translations of
// their plans: the same plan set then gives the same resources.
func (t *Translator) Pure() bool {
	return t.MutateVirtualHost == nil && t.mutated == 0
}
