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
	"container/list"
	"sync"
)

// CacheKeyHeader carries a request's key in the cache model; tailcut's
// affinity hashes on the same header in the demo and the benchmark.
const CacheKeyHeader = "x-cache-key"

// lru is one replica's cache of keys: a fixed number of the most recently
// used. A key enters when a miss has been served in full: a miss whose
// caller gave up (a hedge that lost) fetched nothing.
type lru struct {
	mu    sync.Mutex
	size  int
	order *list.List // front: most recently used
	keys  map[string]*list.Element
}

func newLRU(size int) *lru {
	return &lru{size: size, order: list.New(), keys: map[string]*list.Element{}}
}

// lookup says whether key is cached, and marks it used.
func (c *lru) lookup(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.keys[key]
	if ok {
		c.order.MoveToFront(e)
	}
	return ok
}

// add caches key, evicting the least recently used beyond the size.
func (c *lru) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.keys[key]; ok {
		c.order.MoveToFront(e)
		return
	}
	c.keys[key] = c.order.PushFront(key)
	for c.order.Len() > c.size {
		oldest := c.order.Back()
		c.order.Remove(oldest)
		delete(c.keys, oldest.Value.(string))
	}
}

// len is the number of keys cached.
func (c *lru) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}
