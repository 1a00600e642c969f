// The Node.js peer of seckill's benchmark (scripts/bench.sh): the flash-sale server seed 002
// describes, as a user would write it in Node — a tiny HTTP server that runs seed 002's Lua
// script (seed002.lua) through ioredis for every claim and answers its outcome as JSON. It
// takes the same requests as seckill's claim route (POST a JSON body {"user_id", "qty"} to any
// path), so the same wrk script storms both in the same run.
//
// usage: node server.js PORT REDIS_PORT [TICKET_KEY=air_id:bench]
'use strict';
const http = require('http');
const fs = require('fs');
const path = require('path');
const Redis = require('ioredis');

const port = Number(process.argv[2] || 8090);
const redisPort = Number(process.argv[3] || 6379);
const ticket = process.argv[4] || 'air_id:bench';
const redis = new Redis({ port: redisPort, host: '127.0.0.1' });
redis.defineCommand('seckill', {
  numberOfKeys: 1,
  lua: fs.readFileSync(path.join(__dirname, 'seed002.lua'), 'utf8'),
});
const OUTCOMES = { 0: 'already_claimed', 1: 'won', 2: 'sold_out', 3: 'over_limit' };

function answer(res, status, body) {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

http
  .createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      let claim;
      try {
        claim = JSON.parse(Buffer.concat(chunks).toString('utf8'));
      } catch (e) {
        return answer(res, 400, { error: { code: 'invalid_request', message: 'body is not JSON' } });
      }
      const user = claim && claim.user_id;
      const qty = claim && claim.qty === undefined ? 1 : claim && claim.qty;
      if (typeof user !== 'string' || user === '' || !Number.isInteger(qty) || qty < 1) {
        return answer(res, 400, { error: { code: 'invalid_request', message: 'user_id and qty are required' } });
      }
      redis.seckill(`user_id:${user}`, ticket, qty).then(
        (code) => answer(res, 200, { outcome: OUTCOMES[code] }),
        (e) => answer(res, 503, { error: { code: 'internal', message: String(e.message) } }),
      );
    });
  })
  .listen(port, '127.0.0.1', () => console.log(`seed 002 node peer listening on http://127.0.0.1:${port}`));
