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
	"context"
	"time"

	k8stypes "k8s.io/apimachinery/pkg/types"

	"github.com/tailcut/tailcut/controllers/plan"
)

// retireRetry is how soon the removal of a retired route is tried again
// after it failed.
const retireRetry = 5 * time.Second

// Retire ends a policy's hedging but not its traffic. Clients reach a Service
// through tailcut's Envoy by the policy's route alone: removing the route with
// the policy answered every request 404 (13,473 of 13,491 at 150 requests/s,
// #23). Retire keeps the route the policy last had, unhedged and with the
// endpoints it had, for RetireAfter, and then removes it. That is time for a
// GitOps prune to re-create the policy, for a Service to be re-created and
// for clients to move off the proxy. Publishing the policy again, or another
// policy on the same Service port, ends the retirement at once. The
// retirement lives in this process: a restart of the operator ends it.
// Retiring a route the server does not hold, or one already retiring, does
// nothing.
func (s *Server) Retire(ctx context.Context, key k8stypes.NamespacedName) error {
	if s.opts.RetireAfter <= 0 {
		return s.Remove(ctx, key)
	}
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if _, retiring := s.retiring[key]; retiring {
		return nil
	}
	s.mu.Lock()
	cur, held := s.plans[key]
	s.mu.Unlock()
	if !held {
		return nil
	}
	unhedged := cur.DeepCopy()
	unhedged.Hedge = nil
	if err := s.publishLocked(ctx, key, unhedged); err != nil {
		return err
	}
	s.retirement++
	generation := s.retirement
	s.retiring[key] = generation
	s.log.Info("retired a route: unhedged until it is removed", "policy", key.String(), "removeAfter", s.opts.RetireAfter.String())
	time.AfterFunc(s.opts.RetireAfter, func() { s.removeRetired(key, generation) })
	return nil
}

// removeRetired removes a retired route, unless its retirement ended.
func (s *Server) removeRetired(key k8stypes.NamespacedName, generation uint64) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	if g, retiring := s.retiring[key]; !retiring || g != generation {
		return
	}
	if err := s.removeLocked(context.Background(), key); err != nil {
		s.log.Error(err, "removing a retired route; trying again", "policy", key.String(), "in", retireRetry.String())
		time.AfterFunc(retireRetry, func() { s.removeRetired(key, generation) })
		return
	}
	delete(s.retiring, key)
}

// endRetirementsLocked ends the retirement of key, which is published again,
// and removes the retired routes on p's Service port: Envoy routes a Service
// port by one policy. Callers hold pubMu.
func (s *Server) endRetirementsLocked(ctx context.Context, key k8stypes.NamespacedName, p plan.RoutePlan) error {
	for k := range s.retiring {
		if k == key {
			delete(s.retiring, k)
			continue
		}
		s.mu.Lock()
		q, held := s.plans[k]
		s.mu.Unlock()
		if held && q.Namespace == p.Namespace && q.Service == p.Service && q.Port == p.Port {
			if err := s.removeLocked(ctx, k); err != nil {
				return err
			}
			delete(s.retiring, k)
		}
	}
	return nil
}
