package gateway

// The fake picker's message builders and its server, for the package's
// external tests.
var (
	Streamed    = streamed
	SetHeaders  = setHeaders
	ServePicker = servePicker
)
