package host

import "testing"

// BenchmarkTerminalOutput_Write measures a terminal's output buffer kept
// at its default 1 MiB: a command printing without pause (yes) hands it
// 32 KiB at a time; keeping the end must cost about what the bytes do.
func BenchmarkTerminalOutput_Write(b *testing.B) {
	chunk := make([]byte, terminalReadBufferBytes)
	for i := range chunk {
		chunk[i] = "y\n"[i%2]
	}
	out := &outputBuffer{limit: DefaultMaxTerminalBytes}
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	for b.Loop() {
		out.write(chunk)
	}
}
