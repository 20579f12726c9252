package balance

import (
	"encoding/binary"
	"math/bits"
)

// sum64 is MurmurHash3 x64_128 (seed 0), first 64 bits — the value of
// github.com/spaolacci/murmur3.Sum64 (tested equal), written so the input
// does not escape: hashing a stack array allocates nothing on the pick path.
func sum64(p []byte) uint64 {
	var h1, h2 uint64
	n := len(p)
	for len(p) >= 16 {
		h1, h2 = block(h1, h2, binary.LittleEndian.Uint64(p), binary.LittleEndian.Uint64(p[8:]))
		p = p[16:]
	}
	var k1, k2 uint64
	switch len(p) {
	case 15:
		k2 ^= uint64(p[14]) << 48
		fallthrough
	case 14:
		k2 ^= uint64(p[13]) << 40
		fallthrough
	case 13:
		k2 ^= uint64(p[12]) << 32
		fallthrough
	case 12:
		k2 ^= uint64(p[11]) << 24
		fallthrough
	case 11:
		k2 ^= uint64(p[10]) << 16
		fallthrough
	case 10:
		k2 ^= uint64(p[9]) << 8
		fallthrough
	case 9:
		k2 ^= uint64(p[8])
		h2 ^= mixK2(k2)
		fallthrough
	case 8:
		k1 ^= uint64(p[7]) << 56
		fallthrough
	case 7:
		k1 ^= uint64(p[6]) << 48
		fallthrough
	case 6:
		k1 ^= uint64(p[5]) << 40
		fallthrough
	case 5:
		k1 ^= uint64(p[4]) << 32
		fallthrough
	case 4:
		k1 ^= uint64(p[3]) << 24
		fallthrough
	case 3:
		k1 ^= uint64(p[2]) << 16
		fallthrough
	case 2:
		k1 ^= uint64(p[1]) << 8
		fallthrough
	case 1:
		k1 ^= uint64(p[0])
		h1 ^= mixK1(k1)
	}
	return finish(h1, h2, uint64(n))
}

// block mixes one 16-byte block (k1, k2 its little-endian halves) into the state.
func block(h1, h2, k1, k2 uint64) (uint64, uint64) {
	h1 ^= mixK1(k1)
	h1 = bits.RotateLeft64(h1, 27)
	h1 += h2
	h1 = h1*5 + 0x52dce729
	h2 ^= mixK2(k2)
	h2 = bits.RotateLeft64(h2, 31)
	h2 += h1
	h2 = h2*5 + 0x38495ab5
	return h1, h2
}

const murmurC1, murmurC2 = 0x87c37b91114253d5, 0x4cf5ad432745937f

// mixK1 and mixK2 scramble the first and second 8 bytes of a block.
func mixK1(k uint64) uint64 { return bits.RotateLeft64(k*murmurC1, 31) * murmurC2 }
func mixK2(k uint64) uint64 { return bits.RotateLeft64(k*murmurC2, 33) * murmurC1 }

// finish is murmur3's finalisation for an input of n bytes; it returns the
// first 64 bits of the 128-bit hash.
func finish(h1, h2, n uint64) uint64 {
	h1 ^= n
	h2 ^= n
	h1 += h2
	h2 += h1
	h1 = mix(h1)
	h2 = mix(h2)
	return h1 + h2
}

// sum64x4 is sum64 of 4 bytes whose little-endian value is k (an IPv4
// address): the same value, without the loop and the tail switch.
func sum64x4(k uint32) uint64 { return finish(mixK1(uint64(k)), 0, 4) }

// sum64x16 is sum64 of 16 bytes whose little-endian halves are k1 and k2
// (an IPv6 address).
func sum64x16(k1, k2 uint64) uint64 {
	h1, h2 := block(0, 0, k1, k2)
	return finish(h1, h2, 16)
}
