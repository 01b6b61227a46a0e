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
	"fmt"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/go-logr/logr"
	"github.com/tailcut/tailcut/controllers/envoyconf"
	"google.golang.org/protobuf/proto"
)

// streamState is one proxy's ADS stream.
type streamState struct {
	node   string
	sent   map[string]sentResponse // by type URL: the last response sent
	acked  map[string]string       // by type URL: the last version ACKed
	nacked map[string]rejection    // by type URL: the last NACK, until an ACK
	// claimed is the version a proxy named in its first request of a type,
	// before any response: what a proxy that reconnects (to a restarted
	// operator, say) runs. When that version is current the cache sends
	// nothing, so there is no response to ACK; the claim counts as an ACK
	// once this server knows the version, which may be only after its first
	// publish.
	claimed map[string]string
}

type sentResponse struct{ nonce, version string }

type rejection struct{ version, detail string }

// callbacks track streams, ACKs and NACKs. go-control-plane calls them from
// each stream's goroutine.
type callbacks struct{ s *Server }

func (c callbacks) OnStreamOpen(_ context.Context, id int64, _ string) error {
	c.s.mu.Lock()
	c.s.streams[id] = &streamState{sent: map[string]sentResponse{}, acked: map[string]string{}, nacked: map[string]rejection{}, claimed: map[string]string{}}
	c.s.mu.Unlock()
	connectedProxies.Inc()
	c.s.notify()
	return nil
}

func (c callbacks) OnStreamClosed(id int64, _ *corev3.Node) {
	c.s.mu.Lock()
	_, ok := c.s.streams[id]
	delete(c.s.streams, id)
	c.s.mu.Unlock()
	if ok {
		connectedProxies.Dec()
	}
	c.s.notify()
}

// OnStreamRequest reads ACKs and NACKs: a request answering the last response
// of its type (same nonce) ACKs that response's version, or NACKs it when it
// carries an error detail.
func (c callbacks) OnStreamRequest(id int64, req *discoveryv3.DiscoveryRequest) error {
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.streams[id]
	if st == nil {
		return nil
	}
	if st.node == "" && req.GetNode() != nil {
		st.node = peerText(req.GetNode().GetId(), maxNodeID)
		s.checkNode(req.GetNode())
	}
	typ := req.GetTypeUrl()
	last, ok := st.sent[typ]
	if !ok {
		if v := req.GetVersionInfo(); v != "" && req.GetErrorDetail() == nil {
			st.claimed[typ] = v
			s.acceptClaims()
		}
		return nil
	}
	if req.GetResponseNonce() != last.nonce {
		return nil // answering an older response
	}
	if detail := req.GetErrorDetail(); detail != nil {
		st.nacked[typ] = rejection{version: last.version, detail: peerText(detail.GetMessage(), maxNackDetail)}
		nacksTotal.WithLabelValues(shortType(typ)).Inc()
		s.log.Info("proxy rejected xDS update", "node", st.node, "type", shortType(typ), "version", last.version, "error", st.nacked[typ].detail)
		// Envoy NACKs with the version it still runs. The snapshot cache
		// would answer that with the rejected version at once, and again after
		// every NACK; marking the rejected version as seen makes it wait for the
		// next snapshot instead.
		req.VersionInfo = last.version
		s.notify()
		return nil
	}
	if st.acked[typ] != req.GetVersionInfo() || st.nacked[typ] != (rejection{}) {
		st.acked[typ] = req.GetVersionInfo()
		delete(st.nacked, typ)
		s.notify()
	}
	return nil
}

func (c callbacks) OnStreamResponse(_ context.Context, id int64, _ *discoveryv3.DiscoveryRequest, resp *discoveryv3.DiscoveryResponse) {
	pushedBytesTotal.WithLabelValues(shortType(resp.GetTypeUrl())).Add(float64(proto.Size(resp)))
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if st := c.s.streams[id]; st != nil {
		st.sent[resp.GetTypeUrl()] = sentResponse{nonce: resp.GetNonce(), version: resp.GetVersionInfo()}
	}
}

// acceptClaims turns claims of known versions into ACKs, for streams that
// have had no response of the type since. Callers hold mu.
func (s *Server) acceptClaims() {
	changed := false
	for _, st := range s.streams {
		for typ, v := range st.claimed {
			if _, answered := st.sent[typ]; answered {
				delete(st.claimed, typ)
				continue
			}
			if s.knows(typ, v) && st.acked[typ] != v {
				st.acked[typ] = v
				delete(st.claimed, typ)
				changed = true
			}
		}
	}
	if changed {
		s.notify()
	}
}

// knows says whether version is the current or a remembered version of the
// type. Callers hold mu.
func (s *Server) knows(typ, version string) bool {
	if s.versions[typ] == version {
		return true
	}
	for _, tv := range s.history[typ] {
		if tv.version == version {
			return true
		}
	}
	return false
}

// Delta xDS is refused: ACK tracking reads SotW requests only, and the
// bootstrap asks for SotW (api_type GRPC).
func (callbacks) OnDeltaStreamOpen(context.Context, int64, string) error {
	return errors.New("tailcut serves state-of-the-world ADS only; set ads_config.api_type to GRPC")
}

// The remaining callbacks have nothing to track.

func (callbacks) OnDeltaStreamClosed(int64, *corev3.Node) {}

func (callbacks) OnStreamDeltaRequest(int64, *discoveryv3.DeltaDiscoveryRequest) error { return nil }

func (callbacks) OnStreamDeltaResponse(int64, *discoveryv3.DeltaDiscoveryRequest, *discoveryv3.DeltaDiscoveryResponse) {
}

func (callbacks) OnFetchRequest(context.Context, *discoveryv3.DiscoveryRequest) error { return nil }

func (callbacks) OnFetchResponse(*discoveryv3.DiscoveryRequest, *discoveryv3.DiscoveryResponse) {}

// checkNode warns when a proxy's bootstrap expected another listener port.
// Callers hold mu.
func (s *Server) checkNode(n *corev3.Node) {
	v, ok := n.GetMetadata().GetFields()[envoyconf.ListenerPortMetadataKey]
	if !ok {
		return
	}
	if want := s.opts.Translate.ListenerPort; uint32(v.GetNumberValue()) != want {
		s.log.Info("proxy bootstrap expects another listener port; check --listener-port and the Service ports",
			"node", n.GetId(), "bootstrap", v.GetNumberValue(), "programmed", want)
	}
}

// logAdapter hands go-control-plane's logging to logr; its routine messages go
// to debug verbosity.
type logAdapter struct{ l logr.Logger }

func (a logAdapter) Debugf(f string, args ...any) { a.l.V(2).Info(fmt.Sprintf(f, args...)) }

func (a logAdapter) Infof(f string, args ...any) { a.l.V(1).Info(fmt.Sprintf(f, args...)) }

func (a logAdapter) Warnf(f string, args ...any) { a.l.V(1).Info(fmt.Sprintf(f, args...)) }

func (a logAdapter) Errorf(f string, args ...any) { a.l.Error(nil, fmt.Sprintf(f, args...)) }
