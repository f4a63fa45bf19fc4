package broker

// FakeAgent is the fake agent's program, for the tests of package
// broker_test.
func FakeAgent() string { return fakeAgent }
