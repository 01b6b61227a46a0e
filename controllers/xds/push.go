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
	"maps"
	"time"
)

// maxPushDelay bounds how long PushDebounce can hold a change back while
// changes keep coming.
const maxPushDelay = time.Second

// pushRetry is how long a failed push waits before it is tried again.
const pushRetry = time.Second

func (s *Server) kickPush() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// pushLoop pushes the changed plan set once changes pause for PushDebounce, or
// maxPushDelay after the first of them.
func (s *Server) pushLoop(ctx context.Context) {
	s.mu.Lock()
	s.pushing = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.pushing = false
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		deadline := time.NewTimer(maxPushDelay)
		quiet := time.NewTimer(s.opts.PushDebounce)
	wait:
		for {
			select {
			case <-ctx.Done():
				deadline.Stop()
				quiet.Stop()
				return
			case <-s.kick:
				quiet.Reset(s.opts.PushDebounce)
			case <-quiet.C:
				break wait
			case <-deadline.C:
				break wait
			}
		}
		deadline.Stop()
		quiet.Stop()
		s.pushStale(ctx)
	}
}

// pushStale translates the plan set and pushes it when it changed. A failed
// push is retried; a set that does not translate (Publish checks each plan,
// so only a defect gets here) waits for the next change.
func (s *Server) pushStale(ctx context.Context) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	if !s.stale || !s.synced {
		s.mu.Unlock()
		return
	}
	s.stale = false
	next := maps.Clone(s.plans)
	s.mu.Unlock()
	prepared, err := s.prepareLocked(next)
	if err != nil {
		s.log.Error(err, "translating the plan set; nothing pushed until the next change")
		return
	}
	if prepared.version == s.Version() {
		return
	}
	if err := s.push(ctx, prepared); err != nil {
		s.log.Error(err, "pushing an xDS snapshot; retrying", "version", prepared.version)
		s.mu.Lock()
		s.stale = true
		s.mu.Unlock()
		time.AfterFunc(pushRetry, s.kickPush)
	}
}
