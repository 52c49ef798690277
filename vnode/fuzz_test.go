package vnode

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// FuzzUnmarshalBitmap holds UnmarshalBitmap to its contract on arbitrary input: it
// returns an error or a bitmap that round-trips (marshal, unmarshal, Equal), whose
// members are all below its count, and it never panics. Seeds: testdata/fuzz/.
func FuzzUnmarshalBitmap(f *testing.F) {
	for _, b := range []*Bitmap{
		NewBitmap(1), Full(1), NewBitmap(8, 1, 3), FromRange(256, 16, 200),
		NewBitmap(MaxCount, 0, 4096, 32767), Full(MaxCount),
	} {
		data, err := b.MarshalBinary()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		b, err := UnmarshalBitmap(data)
		if !bytes.Equal(data, orig) {
			t.Fatalf("UnmarshalBitmap modified its input")
		}
		if err != nil {
			if b != nil {
				t.Fatalf("UnmarshalBitmap returned a bitmap and the error %v", err)
			}
			return
		}
		if err := CheckCount(b.Count()); err != nil {
			t.Fatal(err)
		}
		n := 0
		b.Iterate(func(v Vnode) bool {
			if int(v) >= b.Count() {
				t.Fatalf("vnode %d in a bitmap over %d", v, b.Count())
			}
			n++
			return true
		})
		if n != b.Len() {
			t.Fatalf("Iterate saw %d vnodes, Len says %d", n, b.Len())
		}
		again, err := b.MarshalBinary()
		if err != nil {
			t.Fatalf("MarshalBinary of a decoded bitmap: %v", err)
		}
		back, err := UnmarshalBitmap(again)
		if err != nil {
			t.Fatalf("UnmarshalBitmap of a re-marshaled bitmap: %v", err)
		}
		if !back.Equal(b) {
			t.Fatalf("round trip changed %s into %s", b, back)
		}
		// Re-marshaling is canonical: a second round gives the same bytes.
		if third, _ := back.MarshalBinary(); !bytes.Equal(third, again) {
			t.Fatalf("re-marshaling is not stable")
		}
		// Aliasing: clobbering the input must not change the bitmap.
		for i := range data {
			data[i] = ^data[i]
		}
		if !back.Equal(b) || b.Len() != n {
			t.Fatalf("bitmap changed when its input bytes did")
		}
	})
}

// TestFuzzCorpus checks that the checked-in corpus means what its file names say:
// valid_* decode, everything else is rejected.
func TestFuzzCorpus(t *testing.T) {
	const dir = "testdata/fuzz/FuzzUnmarshalBitmap"
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	valid := 0
	for _, e := range entries {
		text, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		header, arg, _ := strings.Cut(strings.TrimSpace(string(text)), "\n")
		lit, ok := strings.CutPrefix(arg, "[]byte(")
		lit, ok2 := strings.CutSuffix(lit, ")")
		data, err := strconv.Unquote(lit)
		if header != "go test fuzz v1" || !ok || !ok2 || err != nil {
			t.Fatalf("%s: not a fuzz corpus file of one []byte", e.Name())
		}
		_, err = UnmarshalBitmap([]byte(data))
		if isValid := strings.HasPrefix(e.Name(), "valid_"); isValid != (err == nil) {
			t.Errorf("%s: UnmarshalBitmap error = %v", e.Name(), err)
		} else if isValid {
			valid++
		}
	}
	if valid == 0 || valid == len(entries) {
		t.Errorf("corpus has %d valid entries of %d, want both kinds", valid, len(entries))
	}
}

// TestReadRoaringNeverPanics feeds corrupted payloads straight to readRoaring, past
// checkRoaring, to exercise the second line of defence: roaring's own parser may fail
// however it likes, but an error must come back, never a panic.
func TestReadRoaringNeverPanics(t *testing.T) {
	rng, seed := testRand(t)
	var payloads [][]byte
	for _, b := range []*Bitmap{NewBitmap(8, 1, 3), FromRange(256, 16, 200), Full(MaxCount), mustDense(t)} {
		data, _ := b.MarshalBinary()
		payloads = append(payloads, data[bitmapHeaderLen:])
	}
	for i := range 3000 {
		p := bytes.Clone(payloads[rng.IntN(len(payloads))])
		switch rng.IntN(3) {
		case 0: // flip a few bytes
			for range 1 + rng.IntN(4) {
				p[rng.IntN(len(p))] = byte(rng.Uint32())
			}
		case 1: // truncate
			p = p[:rng.IntN(len(p))]
		default: // random bytes behind a valid cookie
			p = p[:4]
			for range rng.IntN(64) {
				p = append(p, byte(rng.Uint32()))
			}
		}
		func() {
			defer func() {
				if r := recover(); r != nil {
					t.Fatalf("seed %d case %d: readRoaring(% x) panicked: %v", seed, i, p[:min(len(p), 32)], r)
				}
			}()
			_, _ = readRoaring(p)
		}()
	}
}
