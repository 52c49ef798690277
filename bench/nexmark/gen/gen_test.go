package gen

import (
	"flag"
	"fmt"
	"hash/fnv"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/vec"
)

var (
	update   = flag.Bool("update", false, "rewrite testdata/golden.txt")
	seedFlag = flag.Uint64("seed", 0, "run seed of the randomised tests (0: a new one each run)")
)

// testSeed is the run seed of the randomised tests, logged so that a failure replays
// with -seed.
func testSeed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", s, s)
	return s
}

// fmtTime prints a µs timestamp.
func fmtTime(ts arrow.Timestamp) string {
	return time.UnixMicro(int64(ts)).UTC().Format("2006-01-02T15:04:05.000000")
}

// fmtExtra prints extra by its length and FNV-1a hash: its content is random letters.
func fmtExtra(s string) string {
	h := fnv.New32a()
	h.Write([]byte(s))
	return fmt.Sprintf("len=%d fnv=%08x", len(s), h.Sum32())
}

func fmtPerson(p *tables.Person) string {
	return fmt.Sprintf("person id=%d name=%q email=%q card=%q city=%q state=%q date_time=%s extra=%s",
		p.ID, p.Name, p.EmailAddress, p.CreditCard, p.City, p.State, fmtTime(p.DateTime), fmtExtra(p.Extra))
}

func fmtAuction(a *tables.Auction) string {
	return fmt.Sprintf("auction id=%d item=%q desc=%q initial_bid=%d reserve=%d date_time=%s expires=%s seller=%d category=%d extra=%s",
		a.ID, a.ItemName, a.Description, a.InitialBid, a.ReserveCol, fmtTime(a.DateTime), fmtTime(a.Expires), a.Seller, a.Category, fmtExtra(a.Extra))
}

func fmtBid(b *tables.Bid) string {
	return fmt.Sprintf("bid auction=%d bidder=%d price=%d channel=%q url=%q date_time=%s extra=%s",
		b.Auction, b.Bidder, b.Price, b.Channel, b.URL, fmtTime(b.DateTime), fmtExtra(b.Extra))
}

func fmtEvent(e *Event) string {
	switch e.Kind {
	case KindPerson:
		return fmtPerson(&e.Person)
	case KindAuction:
		return fmtAuction(&e.Auction)
	}
	return fmtBid(&e.Bid)
}

// rowsOf formats the rows of chunks of every kind, in chunk order.
func rowsOf(t testing.TB, kind Kind, c *vec.Chunk) []string {
	var out []string
	switch kind {
	case KindPerson:
		v, err := tables.NewPersonView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			r := v.Row(i)
			out = append(out, fmtPerson(&r))
		}
	case KindAuction:
		v, err := tables.NewAuctionView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			r := v.Row(i)
			out = append(out, fmtAuction(&r))
		}
	default:
		v, err := tables.NewBidView(c)
		if err != nil {
			t.Fatal(err)
		}
		for i := range v.NumRows() {
			r := v.Row(i)
			out = append(out, fmtBid(&r))
		}
	}
	return out
}

// fill runs Fill for one split into fresh builders and returns the formatted rows.
func fill(t testing.TB, g *Generator, mem memory.Allocator, from, to uint64, split, of int) []string {
	p, a, b := tables.NewPersonBuilder(mem), tables.NewAuctionBuilder(mem), tables.NewBidBuilder(mem)
	defer p.Release()
	defer a.Release()
	defer b.Release()
	g.Fill(from, to, split, of, p, a, b)
	var out []string
	for _, kc := range []struct {
		k Kind
		c *vec.Chunk
	}{{KindPerson, p.Build()}, {KindAuction, a.Build()}, {KindBid, b.Build()}} {
		out = append(out, rowsOf(t, kc.k, kc.c)...)
		kc.c.Release()
	}
	return out
}

func TestGolden(t *testing.T) {
	g := New(Config{Seed: 1})
	var sb strings.Builder
	sb.WriteString("# Events 0 to 59 of seed 1 at the default rate and base time (go test -run TestGolden -update rewrites this file).\n")
	for n := range uint64(60) {
		e := g.Event(n)
		fmt.Fprintf(&sb, "%d %s\n", n, fmtEvent(&e))
	}
	path := filepath.Join("testdata", "golden.txt")
	if *update {
		if err := os.WriteFile(path, []byte(sb.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.String(); got != string(want) {
		gl, wl := strings.Split(got, "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("line %d differs from %s (rerun with -update if the change is meant):\ngot  %s\nwant %s", i+1, path, gl[i], wl[i])
			}
		}
		t.Fatalf("%s: got %d lines, want %d", path, len(gl), len(wl))
	}
}

func TestKinds(t *testing.T) {
	const events = 500_000
	var counts [3]int
	for w := uint64(0); w < events; w += TotalProportion {
		var win [3]int
		for n := w; n < w+TotalProportion; n++ {
			win[KindOf(n)]++
			counts[KindOf(n)]++
		}
		if win != [3]int{1, 3, 46} {
			t.Fatalf("events %d..%d: kinds %v, want [1 3 46]", w, w+49, win)
		}
	}
	if counts != [3]int{10_000, 30_000, 460_000} {
		t.Fatalf("kinds of %d events: %v", events, counts)
	}
	r := rand.New(rand.NewPCG(testSeed(t), 0))
	for range 1000 {
		from := r.Uint64N(1000)
		to := from + r.Uint64N(300)
		var want [3]uint64
		for n := from; n < to; n++ {
			want[KindOf(n)]++
		}
		p, a, b := Counts(from, to)
		if got := [3]uint64{p, a, b}; got != want {
			t.Fatalf("Counts(%d, %d) = %v, want %v", from, to, got, want)
		}
	}
}

func TestLastIDs(t *testing.T) {
	for _, c := range []struct {
		n                   uint64
		person, lastAuction int64
	}{
		{0, 0, -1}, {1, 0, 0}, {2, 0, 1}, {3, 0, 2}, {4, 0, 2}, {49, 0, 2},
		{50, 1, 2}, {51, 1, 3}, {53, 1, 5}, {99, 1, 5}, {100, 2, 5}, {5003, 100, 302}, {5004, 100, 302}, {5050, 101, 302},
	} {
		if got := LastPerson(c.n); got != c.person {
			t.Errorf("LastPerson(%d) = %d, want %d", c.n, got, c.person)
		}
		if got := LastAuction(c.n); got != c.lastAuction {
			t.Errorf("LastAuction(%d) = %d, want %d", c.n, got, c.lastAuction)
		}
	}
}

func TestTimestamps(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		rate   int
		n      uint64
		micros int64
	}{
		{0, 0, 0}, {0, 1, 100}, {0, 12345, 1_234_500},
		{3, 1, 333_333}, {3, 2, 666_666}, {7, 1_000_000_000, 142_857_142_857_142},
		{MaxRate, 17, 17}, {999_999, 999_999, 1_000_000}, {1, 1 << 40, 1 << 40 * 1_000_000},
	} {
		g := New(Config{Rate: c.rate})
		if got := int64(g.Timestamp(c.n)) - base.UnixMicro(); got != c.micros {
			t.Errorf("rate %d: Timestamp(%d) = base + %d µs, want %d", c.rate, c.n, got, c.micros)
		}
	}
	// The specification's millisecond timestamps are the µs ones rounded.
	r := rand.New(rand.NewPCG(testSeed(t), 1))
	for range 10_000 {
		rate := 1 + r.IntN(MaxRate)
		n := r.Uint64N(1 << 40)
		g := &Generator{rate: uint64(rate)} // New would draw a channel table each time
		// round(n * 1e6 / rate / 1000), exactly, half up.
		num := new(big.Int).Mul(new(big.Int).SetUint64(n), big.NewInt(1_000_000))
		num.Add(num, big.NewInt(int64(rate)*500))
		want := num.Quo(num, big.NewInt(int64(rate)*1000)).Int64()
		if got := g.millis(n); got != want {
			t.Fatalf("rate %d: ts(%d) = base + %d ms, want %d", rate, n, got, want)
		}
		if g.Timestamp(n+1) <= g.Timestamp(n) {
			t.Fatalf("rate %d: Timestamp(%d) = %d is not after Timestamp(%d)", rate, n+1, g.Timestamp(n+1), n)
		}
	}
	other := time.Date(2030, 5, 6, 7, 8, 9, 123_456_000, time.UTC)
	if got := New(Config{BaseTime: other}).Timestamp(0); int64(got) != other.UnixMicro() {
		t.Errorf("Timestamp(0) = %d with base %v", got, other)
	}
}

func TestNewPanics(t *testing.T) {
	for _, rate := range []int{-1, MaxRate + 1} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with rate %d did not panic", rate)
				}
			}()
			New(Config{Rate: rate})
		}()
	}
	for _, c := range [][2]int{{0, 0}, {-1, 3}, {3, 3}} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("Fill split %d of %d did not panic", c[0], c[1])
				}
			}()
			New(Config{}).Fill(0, 10, c[0], c[1], nil, nil, nil)
		}()
	}
}

func TestDeterminism(t *testing.T) {
	seed := testSeed(t)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	g1, g2 := New(Config{Seed: seed}), New(Config{Seed: seed})
	const from, to = 1234, 1234 + 20_000

	// Event(n): the same across calls, generators and orders.
	var want []string
	for n := uint64(from); n < to; n++ {
		e := g1.Event(n)
		want = append(want, fmtEvent(&e))
	}
	r := rand.New(rand.NewPCG(seed, 2))
	for _, i := range r.Perm(to - from) {
		n := uint64(from + i)
		e1, e2 := g1.Event(n), g2.Event(n)
		if got := fmtEvent(&e1); got != want[i] {
			t.Fatalf("event %d differs across calls:\n%s\n%s", n, got, want[i])
		}
		if e1 != e2 {
			t.Fatalf("event %d differs across generators of seed %d:\n%s\n%s", n, seed, fmtEvent(&e1), fmtEvent(&e2))
		}
	}
	diff := 0
	g3 := New(Config{Seed: seed + 1})
	for n := uint64(from); n < from+100; n++ {
		if g1.Event(n) != g3.Event(n) {
			diff++
		}
	}
	if diff < 99 {
		t.Errorf("seeds %d and %d agree on %d of 100 events", seed, seed+1, 100-diff)
	}

	// Fill of one split: the rows of Event, in order, by table.
	var byKind [3][]string
	for n := uint64(from); n < to; n++ {
		byKind[KindOf(n)] = append(byKind[KindOf(n)], want[n-from])
	}
	whole := slices.Concat(byKind[0], byKind[1], byKind[2])
	if got := fill(t, g2, mem, from, to, 0, 1); !slices.Equal(got, whole) {
		t.Fatalf("Fill(%d, %d, 0, 1) differs from Event", from, to)
	}

	// Splits i of k, merged, in any order: the same multiset.
	slices.Sort(whole)
	for _, k := range []int{1, 2, 3, 7, 50, 64} {
		var merged []string
		for _, i := range r.Perm(k) {
			merged = append(merged, fill(t, g2, mem, from, to, i, k)...)
		}
		slices.Sort(merged)
		if !slices.Equal(merged, whole) {
			t.Fatalf("%d splits merged differ from one", k)
		}
	}
	// Empty and tiny ranges.
	if got := fill(t, g2, mem, 10, 10, 0, 1); len(got) != 0 {
		t.Fatalf("empty range gave %d rows", len(got))
	}
	if got := fill(t, g2, mem, 10, 12, 0, 3); len(got) != 0 {
		t.Fatalf("range [10, 12) split 0 of 3 gave %d rows", len(got))
	}
	if got, e := fill(t, g2, mem, 10, 12, 2, 3), g2.Event(11); !slices.Equal(got, []string{fmtEvent(&e)}) {
		t.Fatalf("range [10, 12) split 2 of 3 gave %v", got)
	}
	// Nil builders skip their kinds.
	b := tables.NewBidBuilder(mem)
	g2.Fill(from, to, 0, 1, nil, nil, b)
	c := b.Build()
	b.Release()
	if got := rowsOf(t, KindBid, c); !slices.Equal(got, byKind[KindBid]) {
		t.Fatalf("Fill with only a bid builder: %d rows, want %d", len(got), len(byKind[KindBid]))
	}
	c.Release()

	// Chunks: the same rows per table, in order, in chunks of at most chunkRows.
	for _, rows := range []int{1, 7, 100, 1 << 16} {
		var got [3][]string
		for kind, c := range g2.Chunks(from, to, rows, mem) {
			if c.NumRows() > rows || c.NumRows() == 0 {
				t.Fatalf("Chunks(%d rows): a %s chunk of %d rows", rows, kind, c.NumRows())
			}
			got[kind] = append(got[kind], rowsOf(t, kind, c)...)
			c.Release()
		}
		for k := range got {
			if !slices.Equal(got[k], byKind[k]) {
				t.Fatalf("Chunks(%d rows): %s rows differ from Event", rows, Kind(k))
			}
		}
	}
	// Stopping early releases everything (the checked allocator asserts it).
	seen := 0
	for _, c := range g2.Chunks(from, to, 10, mem) {
		c.Release()
		if seen++; seen == 5 {
			break
		}
	}
}

// TestConcurrentSplits runs k splits on one Generator in parallel (run it with -race):
// their rows merged are the rows of one sequential Fill.
func TestConcurrentSplits(t *testing.T) {
	seed := testSeed(t)
	g := New(Config{Seed: seed})
	mem := memory.NewGoAllocator()
	const from, to, k = 77, 77 + 30_000, 4
	want := fill(t, g, mem, from, to, 0, 1)
	slices.Sort(want)
	parts := make([][]string, k)
	var wg sync.WaitGroup
	for i := range k {
		wg.Go(func() { parts[i] = fill(t, g, mem, from, to, i, k) })
	}
	wg.Wait()
	got := slices.Concat(parts...)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("%d parallel splits differ from a sequential fill", k)
	}
}

var (
	emailRE = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?@([a-z]([a-z ]*[a-z])?)?\.com$`) // str() may trim to ""

	cardRE  = regexp.MustCompile(`^\d{4} \d{4} \d{4} \d{4}$`)
	lowerRE = regexp.MustCompile(`^[a-z]*$`)
	strRE   = regexp.MustCompile(`^([a-z]([a-z ]*[a-z])?)?$`)
	urlRE   = regexp.MustCompile(`^https://www\.nexmark\.com/[a-z_]{3,4}/[a-z_]{3,4}/[a-z_]{3,4}/item\.htm\?query=1(&channel_id=(\d+))?$`)
)

// rangesEvents is how many events TestRanges and TestHotness generate.
const rangesEvents = 500_000

func TestRanges(t *testing.T) {
	seed := testSeed(t)
	g := New(Config{Seed: seed})
	var size [3]float64
	var count [3]int
	fail := func(n uint64, e *Event, format string, args ...any) {
		t.Helper()
		t.Fatalf("event %d (%s): %s", n, fmtEvent(e), fmt.Sprintf(format, args...))
	}
	channelIDs := 0
	coldBids := 0
	for n := range uint64(rangesEvents) {
		e := g.Event(n)
		people := LastPerson(n) + 1
		personOK := func(id int64) bool { // a random person, or the hot one
			id -= FirstPersonID
			return id >= people-min(people, activePeople) && id < people+personLead
		}
		if eventTime(&e) != g.Timestamp(n) {
			fail(n, &e, "date_time %d, want %d", eventTime(&e), g.Timestamp(n))
		}
		switch e.Kind {
		case KindPerson:
			p := &e.Person
			if p.ID != FirstPersonID+int64(n/50) {
				fail(n, &e, "id %d, want %d", p.ID, FirstPersonID+n/50)
			}
			first, last, ok := strings.Cut(p.Name, " ")
			if !ok || !slices.Contains(firstNames[:], first) || !slices.Contains(lastNames[:], last) {
				fail(n, &e, "name %q", p.Name)
			}
			if !slices.Contains(cities[:], p.City) || !slices.Contains([]string{"az", "ca", "id", "or", "wa", "wy"}, p.State) {
				fail(n, &e, "city %q state %q", p.City, p.State)
			}
			if !emailRE.MatchString(p.EmailAddress) || !cardRE.MatchString(p.CreditCard) || !lowerRE.MatchString(p.Extra) {
				fail(n, &e, "email %q card %q or extra", p.EmailAddress, p.CreditCard)
			}
			size[0] += float64(16 + len(p.Name) + len(p.EmailAddress) + len(p.CreditCard) + len(p.City) + len(p.State) + len(p.Extra))
		case KindAuction:
			a := &e.Auction
			if a.ID != FirstAuctionID+LastAuction(n) || a.ID != FirstAuctionID+int64(n/50*3+n%50-1) {
				fail(n, &e, "id %d", a.ID)
			}
			if a.Category < 10 || a.Category >= 15 {
				fail(n, &e, "category %d", a.Category)
			}
			if a.InitialBid < 100 || a.InitialBid > 1e8 || a.ReserveCol-a.InitialBid < 100 || a.ReserveCol-a.InitialBid > 1e8 {
				fail(n, &e, "initial bid %d reserve %d", a.InitialBid, a.ReserveCol)
			}
			if !personOK(a.Seller) {
				fail(n, &e, "seller %d of %d people", a.Seller, people)
			}
			// At 10,000 events/s the horizon of 1666 events is 166 or 167 ms.
			if l := a.Expires - a.DateTime; l < 1000 || l > 2*167*1000 || l%1000 != 0 {
				fail(n, &e, "auction length %d µs", l)
			}
			if len(a.ItemName) >= 20 || len(a.Description) >= 100 || !strRE.MatchString(a.ItemName) || !strRE.MatchString(a.Description) || !lowerRE.MatchString(a.Extra) {
				fail(n, &e, "item, description or extra")
			}
			size[1] += float64(56 + len(a.ItemName) + len(a.Description) + len(a.Extra))
		default:
			b := &e.Bid
			hi := LastAuction(n)
			if id := b.Auction - FirstAuctionID; id < max(hi-inFlightAuctions, 0) || id > hi+auctionLead {
				fail(n, &e, "auction %d, last auction %d", b.Auction, hi+FirstAuctionID)
			}
			if !personOK(b.Bidder) {
				fail(n, &e, "bidder %d of %d people", b.Bidder, people)
			}
			if b.Price < 100 || b.Price > 1e8 {
				fail(n, &e, "price %d", b.Price)
			}
			if i := slices.IndexFunc(hotChannels[:], func(c channel) bool { return c.name == b.Channel }); i >= 0 {
				if b.URL != hotChannels[i].url {
					fail(n, &e, "url of a hot channel")
				}
			} else {
				coldBids++
				var i int
				if _, err := fmt.Sscanf(b.Channel, "channel-%d", &i); err != nil || i < 0 || i >= numChannels || fmt.Sprintf("channel-%d", i) != b.Channel {
					fail(n, &e, "channel %q", b.Channel)
				}
				m := urlRE.FindStringSubmatch(b.URL)
				if m == nil {
					fail(n, &e, "url %q", b.URL)
				}
				if m[2] != "" {
					channelIDs++
					if want := fmt.Sprint(int64(math.Abs(float64(int32(reverse32(uint32(i))))))); m[2] != want {
						fail(n, &e, "channel_id %s, want %s", m[2], want)
					}
				}
			}
			if !lowerRE.MatchString(b.Extra) {
				fail(n, &e, "extra")
			}
			size[2] += float64(32 + len(b.Channel) + len(b.URL) + len(b.Extra))
		}
		count[e.Kind]++
	}
	for k, avg := range []float64{AvgPersonBytes, AvgAuctionBytes, AvgBidBytes} {
		got := size[k] / float64(count[k])
		t.Logf("%s: %d rows of %.1f bytes on average", Kind(k), count[k], got)
		if math.Abs(got-avg) > 0.15*avg {
			t.Errorf("%s rows average %.1f bytes, want %v ± 15%%", Kind(k), got, avg)
		}
	}
	if f := float64(channelIDs) / float64(coldBids); math.Abs(f-0.9) > 0.02 {
		t.Errorf("%.3f of the cold channels' bids have a channel_id, want about 0.9", f)
	}
}

// reverse32 reverses the bits of x, the slow way (an oracle for bits.Reverse32).
func reverse32(x uint32) uint32 {
	var r uint32
	for range 32 {
		r = r<<1 | x&1
		x >>= 1
	}
	return r
}

// eventTime is the event's date_time.
func eventTime(e *Event) arrow.Timestamp {
	switch e.Kind {
	case KindPerson:
		return e.Person.DateTime
	case KindAuction:
		return e.Auction.DateTime
	}
	return e.Bid.DateTime
}

func TestHotness(t *testing.T) {
	seed := testSeed(t)
	g := New(Config{Seed: seed})
	var auctions, hotSellers, bids, hotAuctions, hotBidders, hotChannelBids int
	for n := range uint64(rangesEvents) {
		e := g.Event(n)
		switch e.Kind {
		case KindAuction:
			auctions++
			if e.Auction.Seller == FirstPersonID+LastPerson(n)/100*100 {
				hotSellers++
			}
		case KindBid:
			bids++
			if e.Bid.Auction == FirstAuctionID+LastAuction(n)/100*100 {
				hotAuctions++
			}
			if e.Bid.Bidder == FirstPersonID+LastPerson(n)/100*100+1 {
				hotBidders++
			}
			if !strings.HasPrefix(e.Bid.Channel, "channel-") {
				hotChannelBids++
			}
		}
	}
	// A random draw may also hit the hot id (about 1 in 110 auctions or 1010 people).
	for _, c := range []struct {
		what      string
		hits, of  int
		want, tol float64
	}{
		{"bids on the hot auction", hotAuctions, bids, 0.5 + 0.5/111, 0.01},
		{"bids by the hot bidder", hotBidders, bids, 0.75 + 0.25/1010, 0.01},
		{"auctions by the hot seller", hotSellers, auctions, 0.75 + 0.25/1010, 0.015},
		{"bids on a hot channel", hotChannelBids, bids, 0.5, 0.01},
	} {
		f := float64(c.hits) / float64(c.of)
		t.Logf("%s: %d of %d (%.4f)", c.what, c.hits, c.of, f)
		if math.Abs(f-c.want) > c.tol {
			t.Errorf("%s: %.4f, want %.4f ± %v", c.what, f, c.want, c.tol)
		}
	}
}

func TestBidPKUnique(t *testing.T) {
	seed := testSeed(t)
	events := uint64(2_000_000)
	if testing.Short() {
		events = 200_000
	}
	for _, rate := range []int{DefaultRate, 7, MaxRate} {
		g := New(Config{Seed: seed, Rate: rate})
		type pk struct {
			auction, bidder int64
			ts              arrow.Timestamp
		}
		seen := make(map[pk]uint64, events)
		var s state
		var b tables.Bid
		for n := range events {
			if KindOf(n) != KindBid {
				continue
			}
			g.bid(&s, n, &b)
			k := pk{b.Auction, b.Bidder, b.DateTime}
			if m, dup := seen[k]; dup {
				t.Fatalf("rate %d: bids %d and %d share the pk %+v", rate, m, n, k)
			}
			seen[k] = n
		}
	}
}

func TestNoAllocsPerEvent(t *testing.T) {
	g := New(Config{Seed: 1})
	var s state
	var p tables.Person
	var a tables.Auction
	var b tables.Bid
	n := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		g.person(&s, n, &p)
		g.auction(&s, n+1, &a)
		g.bid(&s, n+4, &b)
		n += 50
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per person, auction and bid, want 0", allocs)
	}
}

func BenchmarkGenerate(b *testing.B) {
	g := New(Config{Seed: 1})
	b.Run("Event", func(b *testing.B) {
		n := uint64(0)
		for b.Loop() {
			_ = g.Event(n)
			n++
		}
		b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
	})
	for _, of := range []int{1, 4} {
		b.Run(fmt.Sprintf("Fill/splits=%d", of), func(b *testing.B) {
			const batch = 1 << 16
			mem := memory.NewGoAllocator()
			p, a, bb := tables.NewPersonBuilder(mem), tables.NewAuctionBuilder(mem), tables.NewBidBuilder(mem)
			defer p.Release()
			defer a.Release()
			defer bb.Release()
			n := uint64(0)
			for b.Loop() {
				// One split of `of`: the events a worker of `of` generates.
				g.Fill(n, n+batch*uint64(of), 0, of, p, a, bb)
				p.Build().Release()
				a.Build().Release()
				bb.Build().Release()
				n += batch * uint64(of)
			}
			b.ReportMetric(float64(b.N)*batch/b.Elapsed().Seconds(), "events/s")
		})
	}
}
