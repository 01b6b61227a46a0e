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

package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
)

// TestLeaderElectionTimes: the flags are refused exactly when client-go's
// leader election would refuse them (it is the judge here), but at start-up
// and with the flags' names.
func TestLeaderElectionTimes(t *testing.T) {
	for _, c := range []struct {
		lease, renew, retry time.Duration
		flag                string // in the error; "" when accepted
	}{
		{15 * time.Second, 10 * time.Second, 2 * time.Second, ""},
		{6 * time.Second, 4 * time.Second, 1 * time.Second, ""},
		{10 * time.Second, 10 * time.Second, 2 * time.Second, "--leader-election-lease-duration"},
		{5 * time.Second, 10 * time.Second, 2 * time.Second, "--leader-election-lease-duration"},
		{15 * time.Second, 2400 * time.Millisecond, 2 * time.Second, "--leader-election-renew-deadline"},
		{15 * time.Second, 2401 * time.Millisecond, 2 * time.Second, ""},
		{15 * time.Second, 10 * time.Second, 0, "--leader-election-retry-period"},
	} {
		err := checkLeaderElectionTimes(c.lease, c.renew, c.retry)
		_, clientGo := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:          &resourcelock.LeaseLock{LockConfig: resourcelock.ResourceLockConfig{Identity: "replica-a"}},
			LeaseDuration: c.lease, RenewDeadline: c.renew, RetryPeriod: c.retry,
			Callbacks: leaderelection.LeaderCallbacks{OnStartedLeading: func(context.Context) {}, OnStoppedLeading: func() {}},
		})
		if (err == nil) != (clientGo == nil) {
			t.Errorf("lease %s, renew %s, retry %s: ours %v, client-go %v", c.lease, c.renew, c.retry, err, clientGo)
		}
		if c.flag == "" && err != nil || c.flag != "" && (err == nil || !strings.Contains(err.Error(), c.flag)) {
			t.Errorf("lease %s, renew %s, retry %s: %v, want an error naming %q", c.lease, c.renew, c.retry, err, c.flag)
		}
	}
}
