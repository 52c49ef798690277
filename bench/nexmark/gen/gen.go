package gen

import (
	"fmt"
	"iter"
	"math/bits"
	"strconv"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/seed04fbb902/weir/bench/nexmark/tables"
	"github.com/seed04fbb902/weir/vec"
)

// Constants of the specification.
const (
	// Proportions of the kinds in every 50 events: event n is a person when n % 50 < 1,
	// an auction when n % 50 < 4, else a bid.
	PersonProportion  = 1
	AuctionProportion = 3
	BidProportion     = 46
	TotalProportion   = PersonProportion + AuctionProportion + BidProportion

	FirstPersonID  = 1000 // id of the first person (event 0)
	FirstAuctionID = 1000 // id of the first auction (event 1)
	FirstCategory  = 10   // categories are FirstCategory + rand[0, NumCategories)
	NumCategories  = 5

	DefaultRate = 10_000  // events/s when Config.Rate is 0
	MaxRate     = 1000000 // the highest rate at which bid date_times stay unique

	AvgPersonBytes  = 200 // the average row sizes extra pads to (see the package doc)
	AvgAuctionBytes = 500
	AvgBidBytes     = 100

	activePeople     = 1000 // people a random person is drawn among
	personLead       = 10   // ids beyond the last person a random person may take
	inFlightAuctions = 100  // auctions a random auction is drawn among
	auctionLead      = 10   // ids beyond the last auction a random auction may take
	hotRatio         = 100  // hot seller, bidder and auction: the last id rounded down to it
	numChannels      = 10_000
)

// DefaultBaseTime is the time of event 0 when Config.BaseTime is zero, so that runs
// are reproducible.
var DefaultBaseTime = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Kind is the kind of an event: the table its row goes to.
type Kind uint8

const (
	KindPerson Kind = iota
	KindAuction
	KindBid
)

func (k Kind) String() string {
	switch k {
	case KindPerson:
		return "person"
	case KindAuction:
		return "auction"
	case KindBid:
		return "bid"
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// KindOf is event n's kind: by n % 50, Person 1 : Auction 3 : Bid 46.
func KindOf(n uint64) Kind {
	switch r := n % TotalProportion; {
	case r < PersonProportion:
		return KindPerson
	case r < PersonProportion+AuctionProportion:
		return KindAuction
	}
	return KindBid
}

// LastPerson is the base-0 id of the last person generated up to event n: n / 50.
func LastPerson(n uint64) int64 {
	return int64(n / TotalProportion)
}

// LastAuction is the base-0 id of the last auction generated up to event n (of the
// auction n itself if it is one); -1 before the first auction.
func LastAuction(n uint64) int64 {
	epoch := int64(n / TotalProportion)
	off := int64(n % TotalProportion)
	switch {
	case off < PersonProportion:
		epoch--
		off = AuctionProportion - 1
	case off >= PersonProportion+AuctionProportion:
		off = AuctionProportion - 1
	default:
		off -= PersonProportion
	}
	return epoch*AuctionProportion + off
}

// Config configures a Generator. The zero Config is seed 0 at the default rate and
// base time.
type Config struct {
	Seed uint64
	// Rate is the event rate, in events/s, that timestamps follow (the generator is not
	// slowed to it): 0 means DefaultRate; at most MaxRate.
	Rate int
	// BaseTime is event 0's timestamp (truncated to microseconds); zero means
	// DefaultBaseTime.
	BaseTime time.Time
}

// Generator generates the Nexmark events of one run. It is immutable after New and safe
// for concurrent use: workers may generate disjoint ranges or splits in parallel.
type Generator struct {
	cfg      Config
	rate     uint64
	base     int64 // µs since the Unix epoch
	channels [numChannels]channel
}

type channel struct {
	name, url string
}

var (
	firstNames = [...]string{"peter", "paul", "luke", "john", "saul", "vicky", "kate", "julie", "sarah", "deiter", "walter"}
	lastNames  = [...]string{"shultz", "abrams", "spencer", "white", "bartels", "walton", "smith", "jones", "noris"}
	cities     = [...]string{"phoenix", "los angeles", "san francisco", "boise", "portland", "bend", "redmond", "seattle", "kent", "cheyenne"}
	states     = [...]string{"az", "ca", "id", "or", "wa", "wy"}
	// names[i*len(lastNames)+j] is firstNames[i] + " " + lastNames[j].
	names = func() (ns [len(firstNames) * len(lastNames)]string) {
		for i, f := range firstNames {
			for j, l := range lastNames {
				ns[i*len(lastNames)+j] = f + " " + l
			}
		}
		return ns
	}()
	hotChannels = [...]channel{
		{"Google", "https://www.nexmark.com/ggl/hot/bid/item.htm?query=1"},
		{"Facebook", "https://www.nexmark.com/fbk/hot/bid/item.htm?query=1"},
		{"Baidu", "https://www.nexmark.com/bdu/hot/bid/item.htm?query=1"},
		{"Apple", "https://www.nexmark.com/apl/hot/bid/item.htm?query=1"},
	}
)

// channelSalt separates the channel table's PCG stream from the events' streams.
const channelSalt = 0x6e65786d61726b21 // "nexmark!"

// New returns the generator of cfg's run. It panics when cfg.Rate is negative or above
// MaxRate.
func New(cfg Config) *Generator {
	if cfg.Rate == 0 {
		cfg.Rate = DefaultRate
	}
	if cfg.Rate < 0 || cfg.Rate > MaxRate {
		panic(fmt.Sprintf("nexmark gen: rate %d events/s is outside [1, %d]", cfg.Rate, MaxRate))
	}
	if cfg.BaseTime.IsZero() {
		cfg.BaseTime = DefaultBaseTime
	}
	g := &Generator{cfg: cfg, rate: uint64(cfg.Rate), base: cfg.BaseTime.UnixMicro()}
	var r rng
	r.p.Seed(cfg.Seed^channelSalt, channelSalt)
	var buf []byte
	for i := range g.channels {
		buf = append(buf[:0], "https://www.nexmark.com/"...)
		buf = r.appendStr(buf, 5, '_')
		buf = append(buf, '/')
		buf = r.appendStr(buf, 5, '_')
		buf = append(buf, '/')
		buf = r.appendStr(buf, 5, '_')
		buf = append(buf, "/item.htm?query=1"...)
		if r.intn(10) > 0 {
			id := int64(int32(bits.Reverse32(uint32(i))))
			buf = append(buf, "&channel_id="...)
			buf = strconv.AppendInt(buf, max(id, -id), 10)
		}
		g.channels[i] = channel{"channel-" + strconv.Itoa(i), string(buf)}
	}
	return g
}

// Config is the generator's configuration, defaults filled in.
func (g *Generator) Config() Config {
	return g.cfg
}

// micros is event n's offset from the base time in µs: floor(n * 1e6 / rate).
func (g *Generator) micros(n uint64) int64 {
	q, r := n/g.rate, n%g.rate
	return int64(q*1_000_000 + r*1_000_000/g.rate)
}

// millis is the specification's ts(n) - base: round(n * 1e6 / rate / 1000) ms.
func (g *Generator) millis(n uint64) int64 {
	return (g.micros(n) + 500) / 1000
}

// Timestamp is event n's date_time: base + floor(n * 1e6 / rate) µs.
func (g *Generator) Timestamp(n uint64) arrow.Timestamp {
	return arrow.Timestamp(g.base + g.micros(n))
}

// Event is one generated event: its number, kind and row (only the field of its kind is
// set).
type Event struct {
	N       uint64
	Kind    Kind
	Person  tables.Person
	Auction tables.Auction
	Bid     tables.Bid
}

// Event generates event n. Its strings share one allocation.
func (g *Generator) Event(n uint64) Event {
	s := state{owned: true}
	e := Event{N: n, Kind: KindOf(n)}
	switch e.Kind {
	case KindPerson:
		g.person(&s, n, &e.Person)
	case KindAuction:
		g.auction(&s, n, &e.Auction)
	default:
		g.bid(&s, n, &e.Bid)
	}
	return e
}

// Fill appends to p, a and b (as inserts) the rows of the events n in [from, to) with
// n % of == split, in order of n: split i of k generates events i, i+k, i+2k, ... A nil
// builder skips its kind's events without generating them. It reserves the rows it
// appends first, and allocates nothing per event but what the builders' string data
// grows by.
func (g *Generator) Fill(from, to uint64, split, of int, p *tables.PersonBuilder, a *tables.AuctionBuilder, b *tables.BidBuilder) {
	if of < 1 || split < 0 || split >= of {
		panic(fmt.Sprintf("nexmark gen: split %d of %d", split, of))
	}
	k := uint64(of)
	first := from + (uint64(split)+k-from%k)%k
	if first < from || first >= to {
		return
	}
	count := (to-first-1)/k + 1
	var np, na, nb int
	for i, n := uint64(0), first; i < count; i, n = i+1, n+k {
		switch KindOf(n) {
		case KindPerson:
			np++
		case KindAuction:
			na++
		default:
			nb++
		}
	}
	if p != nil {
		p.Reserve(np)
	}
	if a != nil {
		a.Reserve(na)
	}
	if b != nil {
		b.Reserve(nb)
	}
	var s state
	var pr tables.Person
	var ar tables.Auction
	var br tables.Bid
	for i, n := uint64(0), first; i < count; i, n = i+1, n+k {
		switch KindOf(n) {
		case KindPerson:
			if p != nil {
				g.person(&s, n, &pr)
				p.Append(vec.Insert, &pr)
			}
		case KindAuction:
			if a != nil {
				g.auction(&s, n, &ar)
				a.Append(vec.Insert, &ar)
			}
		default:
			if b != nil {
				g.bid(&s, n, &br)
				b.Append(vec.Insert, &br)
			}
		}
	}
}

// Counts is how many persons, auctions and bids the events [from, to) hold.
func Counts(from, to uint64) (persons, auctions, bids uint64) {
	if to <= from {
		return 0, 0, 0
	}
	// below(x) counts the kinds of [0, x).
	below := func(x uint64) (p, a, b uint64) {
		q, r := x/TotalProportion, x%TotalProportion
		p = q*PersonProportion + min(r, PersonProportion)
		a = q*AuctionProportion + min(max(r, PersonProportion)-PersonProportion, AuctionProportion)
		b = x - p - a
		return p, a, b
	}
	p1, a1, b1 := below(from)
	p2, a2, b2 := below(to)
	return p2 - p1, a2 - a1, b2 - b1
}

// Chunks generates the events [from, to) as chunks of inserts of at most chunkRows rows
// per table, allocated from mem, yielding each chunk with its table's kind as soon as
// it is full and the partial ones at the end (persons, auctions, bids). The caller owns
// (and releases) every chunk yielded. Stopping early releases the rest.
func (g *Generator) Chunks(from, to uint64, chunkRows int, mem memory.Allocator) iter.Seq2[Kind, *vec.Chunk] {
	if chunkRows < 1 {
		panic(fmt.Sprintf("nexmark gen: %d rows per chunk", chunkRows))
	}
	return func(yield func(Kind, *vec.Chunk) bool) {
		p := tables.NewPersonBuilder(mem)
		defer p.Release()
		a := tables.NewAuctionBuilder(mem)
		defer a.Release()
		b := tables.NewBidBuilder(mem)
		defer b.Release()
		np, na, nb := Counts(from, to)
		rows := uint64(chunkRows)
		p.Reserve(int(min(np, rows)))
		a.Reserve(int(min(na, rows)))
		b.Reserve(int(min(nb, rows)))
		var s state
		var pr tables.Person
		var ar tables.Auction
		var br tables.Bid
		for n := from; n < to; n++ {
			switch KindOf(n) {
			case KindPerson:
				g.person(&s, n, &pr)
				p.Append(vec.Insert, &pr)
				if np--; p.Len() == chunkRows {
					if !yield(KindPerson, p.Build()) {
						return
					}
					p.Reserve(int(min(np, rows)))
				}
			case KindAuction:
				g.auction(&s, n, &ar)
				a.Append(vec.Insert, &ar)
				if na--; a.Len() == chunkRows {
					if !yield(KindAuction, a.Build()) {
						return
					}
					a.Reserve(int(min(na, rows)))
				}
			default:
				g.bid(&s, n, &br)
				b.Append(vec.Insert, &br)
				if nb--; b.Len() == chunkRows {
					if !yield(KindBid, b.Build()) {
						return
					}
					b.Reserve(int(min(nb, rows)))
				}
			}
		}
		if p.Len() > 0 && !yield(KindPerson, p.Build()) {
			return
		}
		if a.Len() > 0 && !yield(KindAuction, a.Build()) {
			return
		}
		if b.Len() > 0 {
			yield(KindBid, b.Build())
		}
	}
}

// state is the scratch of one goroutine's generation: the event's random source and a
// byte buffer that the event's random strings are written into.
type state struct {
	r   rng
	buf []byte
	// owned makes the rows' strings copies of buf (one allocation per event); otherwise
	// they alias buf and are valid until the next event (for builders, which copy).
	owned bool
	s     string // buf as a string, once the event's strings are all written
}

// span is a string of the event as offsets into buf.
type span struct{ lo, hi int }

func (s *state) begin(seed, n uint64) {
	s.r.seed(seed, n)
	s.buf = s.buf[:0]
}

func (s *state) mark() int { return len(s.buf) }

func (s *state) finish() {
	if s.owned {
		s.s = string(s.buf)
	} else {
		s.s = unsafe.String(unsafe.SliceData(s.buf), len(s.buf))
	}
}

func (s *state) str(sp span) string { return s.s[sp.lo:sp.hi] }

// person returns a random existing (or about to exist) base-0 person id at event n.
func (r *rng) person(n uint64) int64 {
	people := LastPerson(n) + 1
	active := min(people, activePeople)
	return people - active + int64(r.intn(uint64(active+personLead)))
}

// auction returns a random in-flight (or about to be) base-0 auction id at event n.
func (r *rng) auction(n uint64) int64 {
	hi := LastAuction(n)
	lo := max(hi-inFlightAuctions, 0)
	return lo + int64(r.intn(uint64(hi-lo+1+auctionLead)))
}

func (g *Generator) person(s *state, n uint64, p *tables.Person) {
	s.begin(g.cfg.Seed, n)
	r := &s.r
	name := names[r.intn(uint64(len(names)))]
	lo := s.mark()
	s.buf = r.appendStr(s.buf, 7, ' ')
	s.buf = append(s.buf, '@')
	s.buf = r.appendStr(s.buf, 5, ' ')
	s.buf = append(s.buf, ".com"...)
	email := span{lo, s.mark()}
	lo = s.mark()
	for i := range 4 {
		if i > 0 {
			s.buf = append(s.buf, ' ')
		}
		s.buf = appendDigits4(s.buf, r.intn(10_000))
	}
	card := span{lo, s.mark()}
	city := cities[r.intn(uint64(len(cities)))]
	st := states[r.intn(uint64(len(states)))]
	lo = s.mark()
	size := 8 + 8 + len(name) + email.hi - email.lo + card.hi - card.lo + len(city) + len(st)
	s.buf = r.appendExtra(s.buf, size, AvgPersonBytes)
	extra := span{lo, s.mark()}
	s.finish()
	*p = tables.Person{
		ID:           FirstPersonID + LastPerson(n),
		Name:         name,
		EmailAddress: s.str(email),
		CreditCard:   s.str(card),
		City:         city,
		State:        st,
		DateTime:     g.Timestamp(n),
		Extra:        s.str(extra),
	}
}

func (g *Generator) auction(s *state, n uint64, a *tables.Auction) {
	s.begin(g.cfg.Seed, n)
	r := &s.r
	lo := s.mark()
	s.buf = r.appendStr(s.buf, 20, ' ')
	item := span{lo, s.mark()}
	lo = s.mark()
	s.buf = r.appendStr(s.buf, 100, ' ')
	desc := span{lo, s.mark()}
	initial := r.price()
	reserve := initial + r.price()
	horizon := g.millis(n+hotRatio*TotalProportion/AuctionProportion) - g.millis(n)
	length := 1 + int64(r.intn(uint64(max(2*horizon, 1))))
	var seller int64
	if r.intn(4) > 0 {
		seller = LastPerson(n) / hotRatio * hotRatio
	} else {
		seller = r.person(n)
	}
	category := FirstCategory + int64(r.intn(NumCategories))
	lo = s.mark()
	size := 7*8 + item.hi - item.lo + desc.hi - desc.lo
	s.buf = r.appendExtra(s.buf, size, AvgAuctionBytes)
	extra := span{lo, s.mark()}
	s.finish()
	ts := g.Timestamp(n)
	*a = tables.Auction{
		ID:          FirstAuctionID + LastAuction(n),
		ItemName:    s.str(item),
		Description: s.str(desc),
		InitialBid:  initial,
		ReserveCol:  reserve,
		DateTime:    ts,
		Expires:     ts + arrow.Timestamp(length*1000),
		Seller:      FirstPersonID + seller,
		Category:    category,
		Extra:       s.str(extra),
	}
}

func (g *Generator) bid(s *state, n uint64, b *tables.Bid) {
	s.begin(g.cfg.Seed, n)
	r := &s.r
	var auction, bidder int64
	if r.intn(2) > 0 {
		auction = LastAuction(n) / hotRatio * hotRatio
	} else {
		auction = r.auction(n)
	}
	if r.intn(4) > 0 {
		bidder = LastPerson(n)/hotRatio*hotRatio + 1
	} else {
		bidder = r.person(n)
	}
	price := r.price()
	var ch *channel
	if r.intn(2) > 0 {
		ch = &hotChannels[r.intn(uint64(len(hotChannels)))]
	} else {
		ch = &g.channels[r.intn(numChannels)]
	}
	size := 4*8 + len(ch.name) + len(ch.url)
	s.buf = r.appendExtra(s.buf, size, AvgBidBytes)
	s.finish()
	*b = tables.Bid{
		Auction:  FirstAuctionID + auction,
		Bidder:   FirstPersonID + bidder,
		Price:    price,
		Channel:  ch.name,
		URL:      ch.url,
		DateTime: g.Timestamp(n),
		Extra:    s.str(span{0, len(s.buf)}),
	}
}
