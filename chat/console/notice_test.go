package console_test

import "testing"

// The engine's notices are printed in the words every platform uses.
func TestConsole_NoticesArePrintedInWords(t *testing.T) {
	tm := newTerm(t)
	tm.say("elicit-odd", "ℹ️ The agent asked “Where do you live?”, but it has fields that cannot be asked here: address (object); answered decline.\n")
	tm.say("", "answer: decline")
}
