// Package bench holds Weir's benchmarks: the kernels of the snapshot read path
// (projected decode, mark, vnode) and, as the engine grows, the snapshot read itself
// and the Nexmark scenarios. Results and the commands that produced them are in
// RESULTS.md. Ratios are measured within one benchmark run, with the two sides
// interleaved, because these machines are noisy.
package bench
