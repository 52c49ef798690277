package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/seed04fbb902/weir/vec"
)

var progRewriteCorpus = flag.Bool("progress-rewrite-corpus", false,
	"rewrite testdata/fuzz/FuzzProgressRow from the progress row encoder instead of checking it")

const progFuzzName = "fz_progress"

// progFuzzCases are the upstream schemas FuzzProgressRow decodes every input against:
// a pk of every column order and kind (multi), the Nexmark bid, and a pk of nullable
// columns only (where a NULL in every position column is a real position).
func progFuzzCases(t testing.TB) []progCase {
	return []progCase{progMulti(t), progBid(t), progAllNull(t)}
}

// progFuzzSeed is one (key, value) input of the seed corpus.
type progFuzzSeed struct {
	name       string
	key, value []byte
}

// progFuzzSeeds are valid rows of every state of every fuzz schema, followed by
// garbage and near misses.
func progFuzzSeeds(t testing.TB) []progFuzzSeed {
	var out []progFuzzSeed
	var multiIP []byte
	for _, c := range progFuzzCases(t) {
		codec, err := newProgressCodec(progFuzzName, c.up)
		if err != nil {
			t.Fatal(err)
		}
		for i, vp := range progStates(c) {
			v := uint16(i * 7 % c.up.VnodeCount)
			val, err := codec.appendValue(nil, v, vp)
			if err != nil {
				t.Fatal(err)
			}
			if c.name == "multi" && vp.State == vec.InProgress && multiIP == nil {
				multiIP = val
			}
			out = append(out, progFuzzSeed{fmt.Sprintf("valid-%s-%02d", c.name, i), codec.appendKey(nil, 7, v), val})
		}
	}
	key0 := AppendKey(nil, 7, 0, vec.AppendKeyInt32(nil, 0, false))
	for i, g := range []progFuzzSeed{
		{key: nil, value: nil},
		{key: []byte{0, 0, 0, 7, 0}, value: []byte{1}},
		{key: key0, value: []byte{1}},
		{key: key0, value: []byte{2, 0, 0}},
		{key: key0, value: bytes.Repeat([]byte{0xff}, 64)},
		{key: key0, value: append([]byte{1}, bytes.Repeat([]byte{0}, 64)...)},
		{key: AppendKey(nil, 7, 0xffff, vec.AppendKeyInt32(nil, 0xffff, false)), value: multiIP},
		{key: AppendKey(nil, 7, 1, vec.AppendKeyInt32(nil, 2, false)), value: multiIP},
		{key: key0, value: multiIP[:len(multiIP)-1]},
		{key: key0, value: append(bytes.Clone(multiIP), 0)},
	} {
		g.name = fmt.Sprintf("garbage-%02d", i)
		out = append(out, g)
	}
	return out
}

// FuzzProgressRow feeds arbitrary (key, value) pairs to DecodeProgressRow for every fuzz
// schema. It never panics; an error wraps ErrCorruptProgress and names the table; a row
// that decodes is canonical: its progress encodes back to exactly the input key (but
// its table id) and value, and decodes again to the same progress.
func FuzzProgressRow(f *testing.F) {
	for _, s := range progFuzzSeeds(f) {
		f.Add(s.key, s.value)
	}
	cases := progFuzzCases(f)
	codecs := make([]*progressCodec, len(cases))
	for i, c := range cases {
		var err error
		if codecs[i], err = newProgressCodec(progFuzzName, c.up); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, key, value []byte) {
		for i, c := range cases {
			v, vp, err := DecodeProgressRow(progFuzzName, c.up, key, value)
			if err != nil {
				if !errors.Is(err, ErrCorruptProgress) || !strings.HasPrefix(err.Error(), "corrupt backfill state: table "+progFuzzName+" vnode ") {
					t.Fatalf("%s: key %x value %x: error %q does not name table and vnode", c.name, key, value, err)
				}
				continue
			}
			codec := codecs[i]
			val2, err := codec.appendValue(nil, v, vp)
			if err != nil {
				t.Fatalf("%s: key %x value %x decodes as vnode %d %s, which does not encode: %v", c.name, key, value, v, vp, err)
			}
			key2 := codec.appendKey(nil, binary.BigEndian.Uint32(key), v)
			v3, vp3, err := codec.decode(key2, val2)
			if err != nil || v3 != v || !vp3.Equal(vp) {
				t.Fatalf("%s: vnode %d %s re-encodes to key %x value %x, which decodes as vnode %d %s (%v)", c.name, v, vp, key2, val2, v3, vp3, err)
			}
			if !bytes.Equal(key2, key) || !bytes.Equal(val2, value) {
				t.Fatalf("%s: key %x value %x decodes as vnode %d %s, which encodes to key %x value %x", c.name, key, value, v, vp, key2, val2)
			}
		}
	})
}

// TestProgressFuzzCorpus keeps the seed corpus of FuzzProgressRow in testdata/fuzz: with
// -progress-rewrite-corpus it writes progFuzzSeeds there; otherwise it checks that the
// files are well formed and that every valid-* seed still decodes for its schema (go
// test runs each file through the fuzz target too).
func TestProgressFuzzCorpus(t *testing.T) {
	dir := filepath.Join("testdata", "fuzz", "FuzzProgressRow")
	if *progRewriteCorpus {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		old, _ := filepath.Glob(filepath.Join(dir, "*-*"))
		for _, f := range old {
			b := filepath.Base(f)
			if strings.HasPrefix(b, "valid-") || strings.HasPrefix(b, "garbage-") {
				os.Remove(f)
			}
		}
		for _, s := range progFuzzSeeds(t) {
			text := "go test fuzz v1\n[]byte(" + strconv.Quote(string(s.key)) + ")\n[]byte(" + strconv.Quote(string(s.value)) + ")\n"
			if err := os.WriteFile(filepath.Join(dir, s.name), []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	files, err := filepath.Glob(filepath.Join(dir, "*"))
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]progCase{}
	for _, c := range progFuzzCases(t) {
		cases[c.name] = c
	}
	valid := map[string]int{}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
		if len(lines) != 3 || lines[0] != "go test fuzz v1" {
			t.Errorf("%s: not a fuzz corpus file of two arguments", file)
			continue
		}
		var args [2][]byte
		for i, l := range lines[1:] {
			q, ok := strings.CutPrefix(l, "[]byte(")
			q, ok2 := strings.CutSuffix(q, ")")
			s, err := strconv.Unquote(q)
			if !ok || !ok2 || err != nil {
				t.Errorf("%s: argument %d is not a []byte literal", file, i)
			}
			args[i] = []byte(s)
		}
		name, ok := strings.CutPrefix(filepath.Base(file), "valid-")
		if !ok {
			continue
		}
		schemaName, _, _ := strings.Cut(name, "-")
		c, ok := cases[schemaName]
		if !ok {
			t.Errorf("%s: no fuzz schema %q", file, schemaName)
			continue
		}
		if _, _, err := DecodeProgressRow(progFuzzName, c.up, args[0], args[1]); err != nil {
			t.Errorf("%s: %v (stale: run go test ./storage -run TestProgressFuzzCorpus -progress-rewrite-corpus)", file, err)
		}
		valid[schemaName]++
	}
	for name := range cases {
		if valid[name] == 0 {
			t.Errorf("%s: no valid-%s-* seeds; run go test ./storage -run TestProgressFuzzCorpus -progress-rewrite-corpus", dir, name)
		}
	}
}
