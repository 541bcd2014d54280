// Package streamtext holds the two cuts every parser of streamed model
// output makes: how much of a text's end may still become a tag (or stop
// string), and how much is an unfinished UTF-8 character. The gateway's
// stop strings, the tool-call parser (internal/toolcall) and the
// reasoning parser (internal/reasoning) hold those back until the next
// piece of output decides them.
package streamtext
