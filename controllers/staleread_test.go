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

package controllers

import (
	"context"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	tailcutv1alpha1 "github.com/tailcut/tailcut/api/v1alpha1"
	"github.com/tailcut/tailcut/controllers/estimate"
	"github.com/tailcut/tailcut/controllers/publish"
)

// staleCache answers the Get of one policy with a copy from before the last
// write, as the manager's cache does for a few milliseconds after it.
type staleCache struct {
	client.Client
	policy *tailcutv1alpha1.HedgePolicy
}

func (c staleCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if p, ok := obj.(*tailcutv1alpha1.HedgePolicy); ok && key == client.ObjectKeyFromObject(c.policy) {
		c.policy.DeepCopyInto(p)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// TestAStaleReadIsNotWritten: a reconcile that reads a policy older than the
// last status write (an ACK wakes the reconciler milliseconds after a write,
// before the cache shows it) has its status write refused and runs again,
// rather than write the older status back. The decision it publishes comes
// from the estimator's memory, not from that status
// (estimate.TestAStaleStatusCannotUndoADecision).
func TestAStaleReadIsNotWritten(t *testing.T) {
	ns := newNamespace(t)
	key := types.NamespacedName{Namespace: ns, Name: "policy"}
	newPolicy(t, ns, "absent", staticDelay(20*time.Millisecond))
	written := waitCondition(t, key, tailcutv1alpha1.ConditionAccepted, metav1.ConditionFalse, tailcutv1alpha1.ReasonTargetNotFound)

	// The cache's copy: the status before the write, and its resourceVersion.
	stale := written.DeepCopy()
	stale.Status = tailcutv1alpha1.HedgePolicyStatus{ObservedGeneration: written.Generation}
	// Another write after it (here an annotation) moves the resourceVersion on.
	patched := written.DeepCopy()
	patched.Annotations = map[string]string{"test.tailcut.dev/touched": "yes"}
	if err := k8s.Patch(context.Background(), patched, client.MergeFrom(written)); err != nil {
		t.Fatal(err)
	}

	r := &HedgePolicyReconciler{
		Client:     staleCache{Client: k8s, policy: stale},
		Estimator:  estimate.StaticOnly{},
		Publishers: map[tailcutv1alpha1.PublishTarget]publish.Publisher{},
		Clock:      clock.RealClock{},
	}
	res, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: key})
	if err != nil {
		t.Fatalf("a stale read is not an error to back off on: %v", err)
	}
	if res.RequeueAfter != conflictRetry {
		t.Errorf("requeue after %s, want %s (run again once the cache caught up)", res.RequeueAfter, conflictRetry)
	}
	var now tailcutv1alpha1.HedgePolicy
	if err := k8s.Get(context.Background(), key, &now); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(now.Status, written.Status) {
		t.Errorf("the stale reconcile wrote the status:\nwas %+v\nnow %+v", written.Status, now.Status)
	}
}
