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

package localstack

import (
	"context"
	"fmt"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	compositev3 "github.com/envoyproxy/go-control-plane/envoy/extensions/clusters/composite/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"github.com/tailcut/tailcut/controllers/plan"
	"github.com/tailcut/tailcut/controllers/target"
	"github.com/tailcut/tailcut/test/harness"
)

// The cache benchmark's comparator for a Service that routes each key to its
// owner: the request goes to the key's owner, its hedge to any replica. tailcut
// does not offer this (with affinity the hedge goes to the key's next owner);
// Envoy 1.40's composite cluster can express it, so the benchmark runs
// tailcut's configuration for the same policy with the hedged cluster made a
// composite of two copies of it: the first attempt goes to the ring-hash copy
// (the owner), every later one to a round-robin copy. Envoy's previous_hosts
// predicate tells hosts apart by cluster, so the round-robin copy may pick the
// owner's address again: about a third of the hedges go back to the owner,
// which (in the workload's cache model, where a pause is the request's, not
// the replica's) only helps this comparator.

// compositeClusterType is Envoy's composite cluster extension.
const compositeClusterType = "envoy.clusters.composite"

// anyReplicaBootstrap is the static bootstrap of tailcut's configuration for
// the policy, with delay in force, on endpoints eps, whose hedges go to any
// replica; its admin listens on adminPort.
func anyReplicaBootstrap(policy *tailcutv1alpha1.HedgePolicy, delay time.Duration, eps []plan.Endpoint, module string, listenPort, adminPort int) (*bootstrapv3.Bootstrap, error) {
	p, err := plan.Build(target.Input(policy, delay, eps))
	if err != nil {
		return nil, err
	}
	res, err := envoyconf.Translate([]plan.RoutePlan{p}, envoyconf.TranslateOptions{ListenerAddress: "127.0.0.1", ListenerPort: uint32(listenPort), HedgeAccountModule: module})
	if err != nil {
		return nil, err
	}
	b, err := envoyconf.StaticBootstrap(res, envoyconf.StaticOptions{})
	if err != nil {
		return nil, err
	}
	if err := hedgeToAnyReplica(b, plan.ClusterName(p.Namespace, p.Service, p.Port)); err != nil {
		return nil, err
	}
	b.Admin = &bootstrapv3.Admin{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: "127.0.0.1", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(adminPort)}}}}}
	if err := b.ValidateAll(); err != nil {
		return nil, err
	}
	return b, nil
}

// hedgeToAnyReplica replaces the cluster named hedged with a composite of
// two copies of it: hedged-owner, as it was, for the first attempt, and
// hedged-any, round robin, for the hedges.
func hedgeToAnyReplica(b *bootstrapv3.Bootstrap, hedged string) error {
	clusters := b.StaticResources.Clusters
	for i, c := range clusters {
		if c.Name != hedged {
			continue
		}
		owner := proto.Clone(c).(*clusterv3.Cluster)
		owner.Name = hedged + "-owner"
		anyReplica := proto.Clone(c).(*clusterv3.Cluster)
		anyReplica.Name, anyReplica.LbPolicy, anyReplica.LbConfig = hedged+"-any", clusterv3.Cluster_ROUND_ROBIN, nil
		cfg, err := anypb.New(&compositev3.ClusterConfig{Clusters: []*compositev3.ClusterConfig_ClusterEntry{{Name: owner.Name}, {Name: anyReplica.Name}}})
		if err != nil {
			return err
		}
		// The router takes the retry budget from the route's cluster: the
		// composite keeps tailcut's, not Envoy's default of 3 retries at once.
		composite := &clusterv3.Cluster{
			Name: hedged, ConnectTimeout: c.ConnectTimeout, LbPolicy: clusterv3.Cluster_CLUSTER_PROVIDED, CircuitBreakers: c.CircuitBreakers,
			ClusterDiscoveryType: &clusterv3.Cluster_ClusterType{ClusterType: &clusterv3.Cluster_CustomClusterType{Name: compositeClusterType, TypedConfig: cfg}},
		}
		b.StaticResources.Clusters = append(append(clusters[:i:i], composite, owner, anyReplica), clusters[i+1:]...)
		return nil
	}
	return fmt.Errorf("no cluster %s in the configuration", hedged)
}

// startAnyReplicaProxy starts an Envoy beside the stack, with the stack's
// policy and replicas, whose hedges go to any replica; stop it with Stop.
func (s *Stack) startAnyReplicaProxy(ctx context.Context, policy *tailcutv1alpha1.HedgePolicy, delay time.Duration) (*harness.Process, Proxy, error) {
	listen, err := harness.ReservePort()
	if err != nil {
		return nil, Proxy{}, err
	}
	admin, err := harness.ReservePort()
	if err != nil {
		return nil, Proxy{}, err
	}
	var eps []plan.Endpoint
	for _, port := range s.opts.Ports.Workloads {
		eps = append(eps, plan.Endpoint{Address: "127.0.0.1", Port: int32(port)})
	}
	b, err := anyReplicaBootstrap(policy, delay, eps, s.bins["hedge-account"], listen, admin)
	if err != nil {
		return nil, Proxy{}, err
	}
	boot, err := envoyconf.MessageYAML(b)
	if err != nil {
		return nil, Proxy{}, err
	}
	p, err := startBenchEnvoy(ctx, s.bins["envoy"], s.opts.Dir, "envoy-any-replica", boot, 2, listen, Host())
	if err != nil {
		return nil, Proxy{}, err
	}
	return p, Proxy{Listener: listen, Admin: admin}, nil
}
