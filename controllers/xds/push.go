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

// pushLoop sends the queued snapshot once changes pause for PushDebounce, or
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
		s.pushQueued(ctx)
	}
}

// pushQueued pushes the queued snapshot; a failed push is queued again,
// unless a newer one took its place, and retried.
func (s *Server) pushQueued(ctx context.Context) {
	s.pubMu.Lock()
	defer s.pubMu.Unlock()
	s.mu.Lock()
	p := s.queued
	s.queued = nil
	s.mu.Unlock()
	if p == nil {
		return
	}
	if err := s.push(ctx, p); err != nil {
		s.log.Error(err, "pushing an xDS snapshot; retrying", "version", p.version)
		s.mu.Lock()
		if s.queued == nil {
			s.queued = p
		}
		s.mu.Unlock()
		time.AfterFunc(pushRetry, s.kickPush)
	}
}
