// Preloaded into Node servers the tests start: every server listens on 127.0.0.1 only (tests
// never bind another address), and reports the port it got on stderr, so PORT=0 can be used.
'use strict';
const net = require('net');
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== 'string') {
      args.splice(1, 0, '127.0.0.1');
    }
  }
  this.once('listening', () => {
    const address = this.address();
    if (address && typeof address === 'object') {
      process.stderr.write(`tether-test-listening ${address.port}\n`);
    }
  });
  return listen.apply(this, args);
};
