// Package probezoo is a zoo of leaky OpenAI-compatible endpoints for
// testing `warden probe`: each is a small reverse proxy in front of a
// healthy warden that gets one thing wrong the way a real cache, billing
// layer or stream multiplexer does — a response cache keyed on the prompt
// but not the API key, one keyed on the prompt's first 64 characters, a
// replay of another tenant's earlier answer, usage off by two, a prefix
// cache visible only in timing, a multiplexer that mixes chunks of
// concurrent streams. None is written with the probe in mind: each
// forwards what it does not get wrong, unchanged. test/probe_zoo_test.go
// runs the probe with its default flags against each.
package probezoo
