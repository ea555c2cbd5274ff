// rpctest.thrift — a tiny service used only by the rpc package's own tests,
// so that rpc/ is tested on a real Kitex service without knowing the lock
// service.

namespace go rpctest

exception TestError {
    1: required string message
}

service Echo {
    string Echo(1: string msg) throws (1: TestError err)
    // Park is answered when the server decides (AMD) or after max_ms.
    string Park(1: string key, 2: i64 max_ms) throws (1: TestError err)
}
