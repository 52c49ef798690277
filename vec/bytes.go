package vec

// Bytes is a reusable arena of byte strings (keys or values of a batch of rows):
// string i is Data[Offsets[i]:Offsets[i+1]]. Reset keeps the memory, so a Bytes reused
// across batches allocates nothing in steady state.
type Bytes struct {
	Data    []byte
	Offsets []int32 // len = Len()+1 once anything was appended; Offsets[0] = 0
}

// Reset empties the arena, keeping its memory.
func (b *Bytes) Reset() {
	b.Data = b.Data[:0]
	b.Offsets = append(b.Offsets[:0], 0)
}

// Len is the number of strings.
func (b *Bytes) Len() int {
	if len(b.Offsets) == 0 {
		return 0
	}
	return len(b.Offsets) - 1
}

// At returns string i. It aliases the arena: valid until the next Reset or Append.
func (b *Bytes) At(i int) []byte { return b.Data[b.Offsets[i]:b.Offsets[i+1]:b.Offsets[i+1]] }

// Append copies s in as the next string.
func (b *Bytes) Append(s []byte) {
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	b.Data = append(b.Data, s...)
	b.Offsets = append(b.Offsets, int32(len(b.Data)))
}

// Commit ends the string that was appended to Data directly since the last one.
func (b *Bytes) Commit() {
	if len(b.Offsets) == 0 {
		b.Offsets = append(b.Offsets, 0)
	}
	b.Offsets = append(b.Offsets, int32(len(b.Data)))
}
