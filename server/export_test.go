package server

// ProxyOptionsFrom is proxyOptionsFrom, for the external tests.
var ProxyOptionsFrom = proxyOptionsFrom
