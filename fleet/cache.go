package fleet

import (
	"container/list"
	"sync"

	"github.com/arbiter-run/arbiter/driver"
)

// cache keeps the views of the runs a worker drove most recently, so driving
// a run again costs only the events appended since.
type cache struct {
	mu    sync.Mutex
	max   int
	order *list.List
	items map[string]*list.Element
}

func newCache(max int) *cache {
	return &cache{max: max, order: list.New(), items: map[string]*list.Element{}}
}

func (c *cache) get(run string) *driver.Run {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[run]; ok {
		c.order.MoveToFront(e)
		return e.Value.(*driver.Run)
	}
	return nil
}

func (c *cache) put(r *driver.Run) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[r.ID()]; ok {
		e.Value = r
		c.order.MoveToFront(e)
		return
	}
	c.items[r.ID()] = c.order.PushFront(r)
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.items, last.Value.(*driver.Run).ID())
	}
}

func (c *cache) drop(run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[run]; ok {
		c.order.Remove(e)
		delete(c.items, run)
	}
}
