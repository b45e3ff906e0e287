package gateway

// The fake picker's message builders, for the package's external tests.
var (
	Streamed   = streamed
	SetHeaders = setHeaders
)
