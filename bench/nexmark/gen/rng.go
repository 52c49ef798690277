package gen

import (
	"math"
	"math/bits"
	"math/rand/v2"
)

// rng is an event's random source: a math/rand/v2 PCG held by value (no allocation),
// with the few draws the generator needs.
type rng struct {
	p rand.PCG
}

// mix is the splitmix64 finaliser: it spreads consecutive event numbers over the PCG's
// second seed word.
func mix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// seed reseeds r for event n of the run with seed seed.
func (r *rng) seed(seed, n uint64) {
	r.p.Seed(seed, mix(n))
}

// intn is uniform in [0, n), n > 0 (Lemire's multiply-shift with rejection).
func (r *rng) intn(n uint64) uint64 {
	hi, lo := bits.Mul64(r.p.Uint64(), n)
	if lo < n {
		thresh := -n % n
		for lo < thresh {
			hi, lo = bits.Mul64(r.p.Uint64(), n)
		}
	}
	return hi
}

// float64 is uniform in [0, 1).
func (r *rng) float64() float64 {
	return float64(r.p.Uint64()>>11) / (1 << 53)
}

// price is round(10^(U*6) * 100): log-uniform in [100, 10^8]. 10^x is computed as
// e^(x ln 10): math.Exp is several times faster than math.Pow.
func (r *rng) price() int64 {
	return int64(math.Round(math.Exp(r.float64()*(6*math.Ln10)) * 100))
}

// appendLetters appends k uniform lowercase letters, 12 from each 64-bit draw.
func (r *rng) appendLetters(dst []byte, k int) []byte {
	for k > 0 {
		u := r.p.Uint64()
		m := min(k, 12)
		for range m {
			var hi uint64
			hi, u = bits.Mul64(u, 26)
			dst = append(dst, 'a'+byte(hi))
		}
		k -= m
	}
	return dst
}

// appendStr appends str(max): 3 + rand[0, max-3) characters, each special with
// probability 1/13 and otherwise a lowercase letter; when special is a space the
// appended string is trimmed of spaces.
func (r *rng) appendStr(dst []byte, max int, special byte) []byte {
	k := 3 + int(r.intn(uint64(max-3)))
	off := len(dst)
	for k > 0 {
		u := r.p.Uint64()
		m := min(k, 7) // 338 = 13*26 choices take under 8.5 bits
		for range m {
			var hi uint64
			hi, u = bits.Mul64(u, 13*26)
			if hi < 26 {
				dst = append(dst, special)
			} else {
				dst = append(dst, 'a'+byte(hi%26))
			}
		}
		k -= m
	}
	if special != ' ' {
		return dst
	}
	for len(dst) > off && dst[len(dst)-1] == ' ' {
		dst = dst[:len(dst)-1]
	}
	lead := 0
	for off+lead < len(dst) && dst[off+lead] == ' ' {
		lead++
	}
	if lead > 0 {
		n := copy(dst[off:], dst[off+lead:])
		dst = dst[:off+n]
	}
	return dst
}

// appendExtra appends the extra column padding a row of size current to about avg
// bytes: want = avg - current, delta = want / 5, rand[want - delta, want + delta)
// letters (none when want <= 0).
func (r *rng) appendExtra(dst []byte, current, avg int) []byte {
	want := avg - current
	if want <= 0 {
		return dst
	}
	delta := want / 5
	k := want - delta
	if delta > 0 {
		k += int(r.intn(uint64(2 * delta)))
	}
	return r.appendLetters(dst, k)
}

// appendDigits4 appends v (< 10,000) as four decimal digits.
func appendDigits4(dst []byte, v uint64) []byte {
	return append(dst, '0'+byte(v/1000), '0'+byte(v/100%10), '0'+byte(v/10%10), '0'+byte(v%10))
}
