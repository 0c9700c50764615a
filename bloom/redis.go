package bloom

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

var (
	//go:embed lua/add.lua
	luaAdd string
	//go:embed lua/contains.lua
	luaContains string
	//go:embed lua/remove.lua
	luaRemove string
	//go:embed lua/reset.lua
	luaReset string

	addScript      = redisstore.NewScript(luaAdd)
	containsScript = redisstore.NewScript(luaContains)
	removeScript   = redisstore.NewScript(luaRemove)
	resetScript    = redisstore.NewScript(luaReset)
)

// redisStore keeps a filter in Redis strings "<prefix>:{<name>}:<kind><i>",
// i = 0 .. nshards-1, of 1-bit or 4-bit cells in BITFIELD's layout. All keys
// share the hash tag {name}. Cell p of the filter is cell p mod 2^shardLog of
// key p >> shardLog.
type redisStore struct {
	r    *redisstore.Store
	g    geo
	keys []string // every shard key, by shard
	typ  string   // BITFIELD type of a cell: "u1" or "u4"
}

func newRedisStore(r *redisstore.Store, name string, g geo) *redisStore {
	keys := make([]string, g.nshards)
	for i := range keys {
		keys[i] = r.Key(name, g.kind.suffix+strconv.Itoa(i))
	}
	return &redisStore{r: r, g: g, keys: keys, typ: "u" + strconv.Itoa(int(g.kind.width))}
}

// batch is one call's cells, grouped by shard as add.lua takes them.
type batch struct {
	keys []string // the shards touched, ascending
	args []string // type, cells per key, bit offsets shard after shard
	cell []int32  // cell[j] is the index in pos of the j-th offset sent; nil: identity
}

// group lays out pos (k cells per item) for add.lua. The offsets are
// formatted into one string and sliced, so the arguments cost a few
// allocations however many there are.
func (s *redisStore) group(pos []uint32) batch {
	w := uint64(s.g.kind.width)
	var b batch
	if s.g.nshards == 1 {
		b.keys = s.keys[:1]
		b.args = make([]string, 2, 2+len(pos))
		b.args[0], b.args[1] = s.typ, strconv.Itoa(len(pos))
		b.args = appendOffsets(b.args, len(pos), func(j int) uint64 { return uint64(pos[j]) * w })
		return b
	}
	// Counting sort of the cells by shard, stable so that each shard's cells
	// keep the items' order.
	counts := make([]int, s.g.nshards)
	for _, p := range pos {
		i, _ := s.g.shard(p)
		counts[i]++
	}
	b.args = []string{s.typ}
	start := make([]int, s.g.nshards)
	next := 0
	for i, c := range counts {
		if c == 0 {
			continue
		}
		b.keys = append(b.keys, s.keys[i])
		b.args = append(b.args, strconv.Itoa(c))
		start[i] = next
		next += c
	}
	b.cell = make([]int32, len(pos))
	for j, p := range pos {
		i, _ := s.g.shard(p)
		b.cell[start[i]] = int32(j)
		start[i]++
	}
	b.args = appendOffsets(b.args, len(pos), func(j int) uint64 {
		_, off := s.g.shard(pos[b.cell[j]])
		return uint64(off) * w
	})
	return b
}

// appendOffsets appends n decimal numbers off(0), ..., off(n-1) to args.
func appendOffsets(args []string, n int, off func(j int) uint64) []string {
	buf := make([]byte, 0, n*10)
	ends := make([]int, n)
	for j := range n {
		buf = strconv.AppendUint(buf, off(j), 10)
		ends[j] = len(buf)
	}
	str := string(buf)
	from := 0
	for _, e := range ends {
		args = append(args, str[from:e])
		from = e
	}
	return args
}

// add sends the cells grouped by shard (add.lua) and maps the reply, one
// character per cell in the order sent, back to the items.
func (s *redisStore) add(ctx context.Context, pos []uint32) ([]bool, error) {
	b := s.group(pos)
	reply, err := s.r.Run(ctx, addScript, b.keys, b.args)
	if err != nil {
		return nil, err
	}
	str, ok := reply.(string)
	if !ok || len(str) != len(pos) {
		return nil, fmt.Errorf("bloom: unexpected script reply %T of length %d, want a string of %d", reply, replyLen(reply), len(pos))
	}
	k := s.g.k
	out := make([]bool, len(pos)/k)
	for j := range len(str) {
		if str[j] != '0' {
			continue // the cell was already set
		}
		cell := j
		if b.cell != nil {
			cell = int(b.cell[j])
		}
		out[cell/k] = true
	}
	return out, nil
}

func replyLen(reply any) int {
	if s, ok := reply.(string); ok {
		return len(s)
	}
	return -1
}

// contains sends the cells item by item (contains.lua): offsets alone for a
// one-shard filter, key index and offset pairs otherwise.
func (s *redisStore) contains(ctx context.Context, pos []uint32) ([]bool, error) {
	w := uint64(s.g.kind.width)
	var keys []string
	args := make([]string, 3, 3+2*len(pos))
	args[0], args[1], args[2] = s.typ, strconv.Itoa(s.g.k), "0"
	if s.g.nshards == 1 {
		keys = s.keys[:1]
		args = appendOffsets(args, len(pos), func(j int) uint64 { return uint64(pos[j]) * w })
	} else {
		args[2] = "1"
		keys, args = s.pairs(keys, args, pos)
	}
	reply, err := s.r.Run(ctx, containsScript, keys, args)
	if err != nil {
		return nil, err
	}
	n := len(pos) / s.g.k
	str, ok := reply.(string)
	if !ok || len(str) != n {
		return nil, fmt.Errorf("bloom: unexpected script reply %T of length %d, want a string of %d", reply, replyLen(reply), n)
	}
	out := make([]bool, n)
	for i := range out {
		out[i] = str[i] == '1'
	}
	return out, nil
}

// pairs appends, per cell of pos, the 1-based index in keys of its shard's
// key (adding the key on first use) and its bit offset.
func (s *redisStore) pairs(keys, args []string, pos []uint32) ([]string, []string) {
	w := uint64(s.g.kind.width)
	index := make(map[int]int, 4) // shard -> 1-based index in keys
	for _, p := range pos {
		i, off := s.g.shard(p)
		ki, ok := index[i]
		if !ok {
			keys = append(keys, s.keys[i])
			ki = len(keys)
			index[i] = ki
		}
		args = append(args, strconv.Itoa(ki), strconv.FormatUint(uint64(off)*w, 10))
	}
	return keys, args
}

// remove sends, per cell, the index of its key among the keys touched and
// its bit offset, item after item (remove.lua).
func (s *redisStore) remove(ctx context.Context, pos []uint32) error {
	keys, args := s.pairs(nil, []string{strconv.Itoa(s.g.k)}, pos)
	_, err := s.r.Run(ctx, removeScript, keys, args)
	return err
}

func (s *redisStore) reset(ctx context.Context) error {
	_, err := s.r.Run(ctx, resetScript, s.keys, nil)
	return err
}
