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

// Command affinitybench is `make bench-affinity`: hedging for a cache-backed
// Service (#27). It runs the cache A/B (localstack.RunCacheAB: the hit ratio
// and the tail without hedging, without affinity, hedging to any replica and
// hedging to the key's next owner) and the key movements (localstack.RunKeyMoves: keys moved
// when replicas are added or removed, under Envoy's ring hash and Maglev),
// writes its section of docs/benchmarks.md, and exits non-zero when a judged
// run misses the goal, after writing.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/tailcut/tailcut/controllers/verify"
	"github.com/tailcut/tailcut/test/envtestutil"
	"github.com/tailcut/tailcut/test/localstack"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-affinity:", err)
		os.Exit(1)
	}
}

func run() error {
	logf := func(f string, a ...any) { fmt.Printf(f+"\n", a...) }
	cache := localstack.CacheABOptions{Logf: logf}
	moves := localstack.KeyMovesOptions{Logf: logf}
	flag.IntVar(&cache.Rate, "rate", 150, "requests per second per arm")
	flag.DurationVar(&cache.Warm, "warm", 30*time.Second, "unmeasured run that fills the caches")
	flag.DurationVar(&cache.Duration, "duration", 90*time.Second, "measured run of each configuration")
	flag.IntVar(&cache.Keys, "keys", 10000, "keys the clients ask for")
	flag.Float64Var(&cache.Zipf, "zipf", verify.DefaultZipfExponent, "Zipf exponent of the keys")
	flag.IntVar(&cache.CacheSize, "cache-size", 500, "keys each replica caches")
	flag.IntVar(&moves.Keys, "moved-keys", 20000, "keys placed before and after each change of the replicas")
	out := flag.String("out", filepath.Join(envtestutil.RepoRoot(), "docs", "benchmarks.md"), "Markdown file whose bench-affinity section is rewritten")
	flag.Parse()
	dir, err := os.MkdirTemp("", "tailcut-bench-affinity-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	cache.Dir, moves.Dir = filepath.Join(dir, "cache"), filepath.Join(dir, "moves")
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	keyMoves, err := localstack.RunKeyMoves(ctx, moves)
	if err != nil {
		return err
	}
	runs, err := localstack.RunCacheAB(ctx, cache)
	if err != nil {
		return err
	}
	lines, missed := localstack.AffinityVerdicts(runs)
	for _, l := range lines {
		fmt.Println(l)
	}
	if err := localstack.WriteSection(*out, "bench-affinity", localstack.AffinitySection(runs, keyMoves, cache, moves, time.Since(start))); err != nil {
		return err
	}
	fmt.Println("wrote", *out)
	if missed {
		return fmt.Errorf("hedging to the key's next owner missed the goal (see above)")
	}
	return nil
}
