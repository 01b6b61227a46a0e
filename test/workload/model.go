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
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"
)

// Model names a latency model.
type Model string

// The latency models. Each reproduces one shape of tail latency that hedging
// meets in production.
const (
	// Bimodal: most requests take Base; SlowProbability of them take Base+SlowExtra,
	// independently per request (a cache miss, a slow disk read). Hedging wins.
	Bimodal Model = "bimodal"
	// Lognormal: a smooth, heavy-tailed distribution with the given median and sigma.
	Lognormal Model = "lognormal"
	// Stall: the whole replica pauses StallFor every StallEvery, like a GC pause.
	// Requests in flight during the pause wait for it to end.
	Stall Model = "stall"
	// BadHost: every request to this replica takes Base+SlowExtra when BadHost is
	// set, Base otherwise. Run one replica with it set.
	BadHost Model = "badhost"
	// Saturation: at most Concurrency requests are served at once, each taking
	// Base; the rest wait in line. Added load adds latency to everyone, so
	// hedging makes the tail worse and must back off.
	Saturation Model = "saturation"
	// Cache: each replica keeps the CacheSize keys (CacheKeyHeader) it
	// served last. A hit takes Base, a miss Base+MissExtra and caches the
	// key; on top, SlowProbability of the requests take SlowExtra more, as
	// in bimodal (a pause, a slow read). A request without a key is a miss
	// that caches nothing. A hedge to a replica that does not own the key is
	// a miss there, and takes the place of a key that replica owns.
	Cache Model = "cache"
)

// CacheResult says how the cache model answered a request: a hit, a miss,
// or "" for the other models.
type CacheResult string

// The cache model's answers.
const (
	CacheHit  CacheResult = "hit"
	CacheMiss CacheResult = "miss"
)

// Config is the workload's latency configuration. It is read from flags, the
// WORKLOAD_CONFIG environment variable (JSON) and PUT /config.
type Config struct {
	Model           Model    `json:"model"`
	Base            Duration `json:"base"`
	SlowProbability float64  `json:"slowProbability"`
	SlowExtra       Duration `json:"slowExtra"`
	Median          Duration `json:"median"`
	Sigma           float64  `json:"sigma"`
	StallEvery      Duration `json:"stallEvery"`
	StallFor        Duration `json:"stallFor"`
	BadHost         bool     `json:"badHost"`
	Concurrency     int      `json:"concurrency"`
	// FailProbability is the share of requests answered 503 after their
	// latency, on every model: a brownout's errors, not a crash.
	FailProbability float64 `json:"failProbability"`
	// CacheSize is the cache model's number of keys per replica.
	CacheSize int `json:"cacheSize"`
	// MissExtra is the cache model's extra latency of a miss.
	MissExtra Duration `json:"missExtra"`
}

// DefaultConfig is 15ms with 5% of requests 100ms slower.
func DefaultConfig() Config {
	return Config{
		Model: Bimodal, Base: Duration(15 * time.Millisecond), SlowProbability: 0.05, SlowExtra: Duration(100 * time.Millisecond),
		Median: Duration(20 * time.Millisecond), Sigma: 0.5,
		StallEvery: Duration(5 * time.Second), StallFor: Duration(150 * time.Millisecond),
		Concurrency: 8,
		CacheSize:   1000, MissExtra: Duration(45 * time.Millisecond),
	}
}

// Validate rejects configurations that cannot run.
func (c Config) Validate() error {
	var errs []error
	switch c.Model {
	case Bimodal, Lognormal, Stall, BadHost, Saturation, Cache:
	default:
		errs = append(errs, fmt.Errorf("model %q is not one of bimodal, lognormal, stall, badhost, saturation, cache", c.Model))
	}
	if c.Base < 0 || c.SlowExtra < 0 || c.Median < 0 || c.StallFor < 0 || c.MissExtra < 0 {
		errs = append(errs, errors.New("durations must not be negative"))
	}
	if c.SlowProbability < 0 || c.SlowProbability > 1 {
		errs = append(errs, fmt.Errorf("slowProbability %v is not in [0, 1]", c.SlowProbability))
	}
	if c.FailProbability < 0 || c.FailProbability > 1 {
		errs = append(errs, fmt.Errorf("failProbability %v is not in [0, 1]", c.FailProbability))
	}
	if c.Model == Lognormal && (c.Median <= 0 || c.Sigma <= 0 || c.Sigma > 3) {
		errs = append(errs, errors.New("lognormal needs median > 0 and sigma in (0, 3]"))
	}
	if c.Model == Stall && (c.StallEvery <= 0 || c.StallFor >= c.StallEvery) {
		errs = append(errs, errors.New("stall needs stallEvery > 0 and stallFor < stallEvery"))
	}
	if c.Model == Saturation && c.Concurrency < 1 {
		errs = append(errs, errors.New("saturation needs concurrency >= 1"))
	}
	if c.Model == Cache && (c.CacheSize < 1 || c.CacheSize > 10_000_000) {
		errs = append(errs, errors.New("cache needs cacheSize between 1 and 10000000 keys"))
	}
	return errors.Join(errs...)
}

// Server applies the configured latency to each request.
type Server struct {
	mu    sync.RWMutex
	cfg   Config
	slots chan struct{} // saturation: one token per request in service
	cache *lru          // cache: the keys this replica served last
	start time.Time
}

// NewServer returns a server running cfg.
func NewServer(cfg Config) (*Server, error) {
	s := &Server{start: time.Now()}
	return s, s.SetConfig(cfg)
}

// Config returns the running configuration.
func (s *Server) Config() Config {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cfg
}

// SetConfig validates and installs cfg.
func (s *Server) SetConfig(cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil || cap(s.slots) != cfg.Concurrency {
		s.slots = make(chan struct{}, max(cfg.Concurrency, 1))
	}
	if cfg.Model == Cache && (s.cache == nil || s.cache.size != cfg.CacheSize) {
		s.cache = newLRU(cfg.CacheSize)
	}
	s.cfg = cfg
	return nil
}

// ErrFailed is Serve's answer for a request the configuration fails.
var ErrFailed = errors.New("failed by failProbability")

// Serve waits the latency the model gives this request, whose cache key is key
// (the cache model's; "" for none). It returns ctx.Err() when the caller gave
// up first (a cancelled hedge loser), so the work stops, and ErrFailed for a
// request FailProbability fails; and, on the cache model, whether the key was
// a hit.
func (s *Server) Serve(ctx context.Context, now time.Time, key string) (CacheResult, error) {
	s.mu.RLock()
	fail := s.cfg.FailProbability
	s.mu.RUnlock()
	result, err := s.wait(ctx, now, key)
	if err != nil {
		return result, err
	}
	if fail > 0 && rand.Float64() < fail {
		return result, ErrFailed
	}
	return result, nil
}

func (s *Server) wait(ctx context.Context, now time.Time, key string) (CacheResult, error) {
	s.mu.RLock()
	cfg, slots, cache := s.cfg, s.slots, s.cache
	s.mu.RUnlock()

	switch cfg.Model {
	case Cache:
		slow := latency(Config{Model: Bimodal, SlowProbability: cfg.SlowProbability, SlowExtra: cfg.SlowExtra}, rand.Float64(), 0)
		if key != "" && cache.lookup(key) {
			return CacheHit, sleep(ctx, cfg.Base.D()+slow)
		}
		if err := sleep(ctx, cfg.Base.D()+cfg.MissExtra.D()+slow); err != nil || key == "" {
			return CacheMiss, err
		}
		cache.add(key)
		return CacheMiss, nil
	case Saturation:
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return "", ctx.Err()
		}
		defer func() { <-slots }()
		return "", sleep(ctx, cfg.Base.D())
	case Stall:
		return "", sleep(ctx, cfg.Base.D()+s.stallRemaining(cfg, now))
	default:
		return "", sleep(ctx, latency(cfg, rand.Float64(), rand.NormFloat64()))
	}
}

// latency draws one request's latency for the stateless models from a uniform
// and a standard normal variate.
func latency(cfg Config, u, z float64) time.Duration {
	switch cfg.Model {
	case Lognormal:
		return time.Duration(float64(cfg.Median.D()) * math.Exp(cfg.Sigma*z))
	case BadHost:
		if cfg.BadHost {
			return cfg.Base.D() + cfg.SlowExtra.D()
		}
		return cfg.Base.D()
	default:
		if u < cfg.SlowProbability {
			return cfg.Base.D() + cfg.SlowExtra.D()
		}
		return cfg.Base.D()
	}
}

// stallRemaining is how long a request arriving at now waits for the current
// pause to end: pauses run for StallFor at the start of every StallEvery.
func (s *Server) stallRemaining(cfg Config, now time.Time) time.Duration {
	phase := now.Sub(s.start) % cfg.StallEvery.D()
	if phase < cfg.StallFor.D() {
		return cfg.StallFor.D() - phase
	}
	return 0
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// MarshalText implements encoding.TextMarshaler.
func (m Model) MarshalText() ([]byte, error) { return []byte(m), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (m *Model) UnmarshalText(b []byte) error {
	*m = Model(b)
	return nil
}

// Duration is a time.Duration that reads and writes as "15ms" in JSON.
type Duration time.Duration

// D returns the time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}
