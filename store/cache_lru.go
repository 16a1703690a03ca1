package store

import (
	"container/list"
	"sync"
)

// lru is a map bounded by the summed cost of its values, dropping the least recently used
// first. Safe for concurrent use. Values are shared with callers and must not be modified.
type lru[K comparable, V any] struct {
	mu    sync.Mutex
	limit int64
	used  int64
	order *list.List // front: most recently used
	items map[K]*list.Element

	// Reference counting for values that are recycled (counted, read_recycle.go): share is
	// called, under the lock, for the cache's own hold when a value is stored and for the
	// caller's when get returns one; drop when the cache lets go of a value. Nil for plain
	// values.
	share, drop func(V)

	// keepOversized keeps a value costing more than the whole limit, alone (the parsed
	// versions: one a reader uses must not be parsed again on every call however large it
	// is). Unset, such a value is not kept.
	keepOversized bool
	// floor is how many of the most recently used values are kept whatever they cost (0 and
	// 1 keep only the newest; the parsed versions keep versionCacheFloor).
	floor int
}

type lruEntry[K comparable, V any] struct {
	key  K
	val  V
	cost int64
}

func newLRU[K comparable, V any](limit int64) *lru[K, V] {
	return &lru[K, V]{limit: limit, order: list.New(), items: map[K]*list.Element{}}
}

// len is how many values are cached.
func (c *lru[K, V]) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

func (c *lru[K, V]) get(k K) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		c.order.MoveToFront(e)
		v := e.Value.(*lruEntry[K, V]).val
		if c.share != nil {
			c.share(v)
		}
		return v, true
	}
	var zero V
	return zero, false
}

// has reports whether k is cached, without handing out its value.
func (c *lru[K, V]) has(k K) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.items[k]
	return ok
}

func (c *lru[K, V]) dropped(v V) {
	if c.drop != nil {
		c.drop(v)
	}
}

// add stores v under k; a value costing more than the whole limit is not kept (unless
// keepOversized).
func (c *lru[K, V]) add(k K, v V, cost int64) {
	if cost > c.limit && !c.keepOversized {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.share != nil {
		c.share(v)
	}
	if e, ok := c.items[k]; ok {
		old := e.Value.(*lruEntry[K, V])
		c.used += cost - old.cost
		c.dropped(old.val)
		old.val, old.cost = v, cost
		c.order.MoveToFront(e)
	} else {
		c.items[k] = c.order.PushFront(&lruEntry[K, V]{key: k, val: v, cost: cost})
		c.used += cost
	}
	for c.used > c.limit && c.order.Len() > max(1, c.floor) {
		e := c.order.Back()
		old := e.Value.(*lruEntry[K, V])
		c.order.Remove(e)
		delete(c.items, old.key)
		c.used -= old.cost
		c.dropped(old.val)
	}
}

func (c *lru[K, V]) remove(k K) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[k]; ok {
		old := e.Value.(*lruEntry[K, V])
		c.used -= old.cost
		c.order.Remove(e)
		delete(c.items, k)
		c.dropped(old.val)
	}
}

// clear drops every entry.
func (c *lru[K, V]) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Front(); e != nil; e = e.Next() {
		c.dropped(e.Value.(*lruEntry[K, V]).val)
	}
	c.order.Init()
	clear(c.items)
	c.used = 0
}

// removeIf drops every entry whose key drop reports (a scan of the whole cache: for the rare
// reload of what is cached of a few objects, read_reload.go).
func (c *lru[K, V]) removeIf(drop func(K) bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for e := c.order.Front(); e != nil; {
		next := e.Next()
		old := e.Value.(*lruEntry[K, V])
		if drop(old.key) {
			c.used -= old.cost
			c.order.Remove(e)
			delete(c.items, old.key)
			c.dropped(old.val)
		}
		e = next
	}
}
