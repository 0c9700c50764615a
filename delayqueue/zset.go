package delayqueue

import "container/heap"

// zset is the Memory mirror of a Redis sorted set: members with integer
// scores, ordered by (score, member) as Redis orders them (members of equal
// score by their bytes). It supports add-or-update, remove, and pop of the
// minimum, each O(log n). It is not safe for concurrent use; memQueue's
// mutex guards it.
type zset struct {
	h   zheap
	idx map[string]*zitem
}

type zitem struct {
	member string
	score  int64
	pos    int // index in the heap
}

func newZset() *zset { return &zset{idx: make(map[string]*zitem)} }

func (z *zset) Len() int { return len(z.h) }

// Add sets member's score, adding it if absent.
func (z *zset) Add(member string, score int64) {
	if it, ok := z.idx[member]; ok {
		it.score = score
		heap.Fix(&z.h, it.pos)
		return
	}
	it := &zitem{member: member, score: score}
	z.idx[member] = it
	heap.Push(&z.h, it)
}

// Remove deletes member and reports whether it was there.
func (z *zset) Remove(member string) bool {
	it, ok := z.idx[member]
	if !ok {
		return false
	}
	heap.Remove(&z.h, it.pos)
	delete(z.idx, member)
	return true
}

// Has reports whether member is in the set.
func (z *zset) Has(member string) bool {
	_, ok := z.idx[member]
	return ok
}

// Score returns the score of member, and whether it is in the set.
func (z *zset) Score(member string) (int64, bool) {
	it, ok := z.idx[member]
	if !ok {
		return 0, false
	}
	return it.score, true
}

// Min returns the first member and its score; ok is false when empty.
func (z *zset) Min() (member string, score int64, ok bool) {
	if len(z.h) == 0 {
		return "", 0, false
	}
	return z.h[0].member, z.h[0].score, true
}

// PopMin removes and returns the first member.
func (z *zset) PopMin() (member string, score int64, ok bool) {
	if len(z.h) == 0 {
		return "", 0, false
	}
	it := heap.Pop(&z.h).(*zitem)
	delete(z.idx, it.member)
	return it.member, it.score, true
}

// head returns the score of the first member, or -1 when empty.
func (z *zset) head() int64 {
	if _, s, ok := z.Min(); ok {
		return s
	}
	return -1
}

type zheap []*zitem

func (h zheap) Len() int { return len(h) }
func (h zheap) Less(i, j int) bool {
	if h[i].score != h[j].score {
		return h[i].score < h[j].score
	}
	return h[i].member < h[j].member
}
func (h zheap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}
func (h *zheap) Push(x any) {
	it := x.(*zitem)
	it.pos = len(*h)
	*h = append(*h, it)
}
func (h *zheap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return it
}
