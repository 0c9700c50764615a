package bloom

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// positions writes the k cells of item to dst (len(dst) == c.k) by enhanced
// double hashing (Dillinger and Manolios, "Bloom Filters in Probabilistic
// Verification", 2004): cell i is
//
//	g_i = h1 + i·h2 + (i³ - i)/6  mod m
//
// where h1 is the 64-bit xxHash (XXH64, seed 0) of the item's bytes and h2 a
// bijective remix of it, each reduced to [0, m) by multiplication (Lemire's
// fast range) rather than division. The cubic term is the only difference
// from plain Kirsch–Mitzenmacher double hashing (h1 + i·h2): with it, two
// items whose h2 coincide or are multiples of each other no longer share
// runs of cells, which measurably raised the false-positive rate of small
// filters with many hashes (2.2× the configured rate at n = 300,
// p = 0.0001, m = 5752, k = 13; 1.15× with the cubic term, 1.0× for k
// independent hashes).
//
// The result depends only on the item and m: it is the storage format shared
// by every process using a filter, and must never change (TestPositionsGolden
// pins it). All arithmetic fits uint64: every value stays below m + 65 and
// m <= 2^32.
func (c *core) positions(dst []uint32, item string) {
	h1 := xxhash.Sum64String(item)
	h2 := mix64(h1)
	x, _ := bits.Mul64(h1, c.m)
	y, _ := bits.Mul64(h2, c.m)
	for i := range dst {
		dst[i] = uint32(x)
		x += y
		if x >= c.m {
			x -= c.m
		}
		y += uint64(i) + 1
		if y >= c.m {
			y %= c.m
		}
	}
}

// mix64 is the SplitMix64 finalizer applied to h xor a constant: a bijection
// whose output bits each depend on every input bit.
func mix64(h uint64) uint64 {
	h ^= 0x9e3779b97f4a7c15
	h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9
	h = (h ^ (h >> 27)) * 0x94d049bb133111eb
	return h ^ (h >> 31)
}
