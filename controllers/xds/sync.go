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
	"errors"

	k8stypes "k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
)

// InitialSync returns a manager.Runnable that waits for the manager's caches,
// lists the HedgePolicies that publish via XDS and calls MarkSynced with their
// keys, so the first snapshot holds every policy that existed at start-up.
//
// It runs on every replica: the leader's reconciler and, on the others, the
// follower publisher report the reconciles it waits for.
func (s *Server) InitialSync(mgr manager.Manager) manager.Runnable {
	return &initialSync{s: s, mgr: mgr}
}

type initialSync struct {
	s   *Server
	mgr manager.Manager
}

func (i *initialSync) NeedLeaderElection() bool { return false }

func (i *initialSync) Start(ctx context.Context) error {
	if !i.mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("xds: caches did not sync")
	}
	keys, err := xdsPolicies(ctx, i.mgr.GetClient())
	if err != nil {
		return err
	}
	i.s.MarkSynced(keys...)
	return nil
}

func xdsPolicies(ctx context.Context, c client.Reader) ([]k8stypes.NamespacedName, error) {
	var list tailcutv1alpha1.HedgePolicyList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	var keys []k8stypes.NamespacedName
	for i := range list.Items {
		p := &list.Items[i]
		if p.DeletionTimestamp.IsZero() && p.Spec.EffectivePublishTarget() == tailcutv1alpha1.PublishXDS {
			keys = append(keys, client.ObjectKeyFromObject(p))
		}
	}
	return keys, nil
}
