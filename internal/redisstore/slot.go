package redisstore

import "strings"

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Slot returns the Redis Cluster hash slot of every key Key(tag, ...)
// returns: CRC16 (XMODEM) of the escaped tag, modulo Slots. On a standalone
// Redis it means nothing but is still defined, so callers can use it to
// spread anything per slot range.
func (r *Store) Slot(tag string) int {
	if !strings.ContainsAny(tag, "{}%") {
		return int(crc16(tag) % Slots)
	}
	var b strings.Builder
	b.Grow(len(tag) + 8)
	writeTag(&b, tag)
	return int(crc16(b.String()) % Slots)
}

// KeySlot returns Redis Cluster's hash slot of a raw key: CRC16 of its hash
// tag (the part between the first '{' and the next '}', when not empty), or
// else of the whole key, modulo Slots — as CLUSTER KEYSLOT computes it.
func KeySlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	return int(crc16(key) % Slots)
}

// Cluster reports whether r runs on a Redis Cluster client (as the adapter
// that made it says): keys of different slots may then live on different
// nodes, which fail on their own.
func (r *Store) Cluster() bool {
	c, ok := r.s.(interface{ Cluster() bool })
	return ok && c.Cluster()
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for range 8 {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// crc16 is CRC-16/XMODEM, the checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var c uint16
	for i := 0; i < len(s); i++ {
		c = c<<8 ^ crcTable[byte(c>>8)^s[i]]
	}
	return c
}
