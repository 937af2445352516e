//! The pull script's sections one at a time: each section's functions run
//! on plain values (and, for the sections that read or write the key, a
//! small fake of the Redis calls they make), in Lua 5.1 as Redis runs them.
//! The whole script is tested over the model of Redis in `script.rs` and
//! by the fleet simulation; these pin each rule where it is written.

use flowctrl::sim::{PULL_SCRIPT, PULL_SCRIPT_SECTIONS};
use mlua::Lua;

/// A fake `redis` for the sections that call it: hashes and strings in
/// Lua tables (fields in insertion order), every command counted in
/// `calls` (`full(i)`: the i-th with its arguments). HSCAN answers a key
/// of up to 16 fields whole (cursor 0); Redis does so for any compact
/// hash (up to 128 fields of 64 bytes), whatever COUNT says.
const FAKE_REDIS: &str = r#"
local hashes, strings = {}, {}
calls, full_calls = {}, {}
function full(i) return full_calls[i] end
local function hash(key)
  if not hashes[key] then hashes[key] = {order = {}, at = {}} end
  return hashes[key]
end
function hset(key, ...)
  local h, a = hash(key), {...}
  for i = 1, #a, 2 do
    local f, v = tostring(a[i]), tostring(a[i + 1])
    if h.at[f] == nil then h.order[#h.order + 1] = f end
    h.at[f] = v
  end
end
function hget(key, field) return hash(key).at[field] end
local function flat(key)
  local h, out = hash(key), {}
  for _, f in ipairs(h.order) do out[#out + 1] = f; out[#out + 1] = h.at[f] end
  return out
end
local handlers = {
  HSCAN = function(key)
    local all = flat(key)
    if #all / 2 <= 16 then return {'0', all} end
    return {'17', {unpack(all, 1, 32)}}
  end,
  HMGET = function(key, ...)
    local out = {}
    for i, f in ipairs({...}) do out[i] = hash(key).at[f] or false end
    return out
  end,
  HLEN = function(key) return #hash(key).order end,
  HGETALL = function(key) return flat(key) end,
  HSET = function(key, ...) hset(key, ...); return 1 end,
  GET = function(key) return strings[key] or false end,
  SET = function(key, value) strings[key] = tostring(value); return {ok = 'OK'} end,
  PEXPIRE = function() return 1 end,
}
redis = {
  call = function(cmd, ...)
    calls[#calls + 1] = cmd
    local words = {cmd}
    for _, a in ipairs({...}) do words[#words + 1] = tostring(a) end
    full_calls[#full_calls + 1] = table.concat(words, ' ')
    return handlers[cmd](...)
  end,
  error_reply = function(msg) return {err = msg} end,
}
function set(key, value) strings[key] = tostring(value) end
function called() return table.concat(calls, ' ') end
function eq(got, want, what)
  if got ~= want then error(what .. ': got ' .. tostring(got) .. ', want ' .. tostring(want), 2) end
end
"#;

/// Runs `test` after the fake and the sections named (the common helpers
/// always first, as the script has them).
fn run(sections: &[&str], test: &str) {
    let mut text = String::from(FAKE_REDIS);
    for &(name, body) in PULL_SCRIPT_SECTIONS {
        if name == "00-common.lua" || sections.contains(&name) {
            text.push_str(body);
        }
    }
    text.push_str(test);
    if let Err(e) = Lua::new().load(&text).set_name("section test").exec() {
        panic!("{e}");
    }
}

#[test]
fn the_script_is_its_sections_in_order() {
    let names: Vec<_> = PULL_SCRIPT_SECTIONS.iter().map(|(n, _)| *n).collect();
    let mut on_disk: Vec<String> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../src/quota/script"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".lua"))
            .collect();
    on_disk.sort();
    assert_eq!(
        names, on_disk,
        "every section file, in the order of its name"
    );
    let whole: String = PULL_SCRIPT_SECTIONS.iter().map(|(_, t)| *t).collect();
    assert_eq!(whole, PULL_SCRIPT);
}

#[test]
fn a_small_key_is_read_whole_and_a_large_one_by_name() {
    run(
        &["10-read.lua"],
        r#"
        hset('k', 'left', 70, 'quota', 100, 'demand', 90, 'h1', '1 2 3 4 5 6')
        local k = read_key('k', 'h1')
        eq(called(), 'HSCAN', 'one scan reads a small key')
        eq(k.got[1], '70', 'left'); eq(k.got[4], '1 2 3 4 5 6', 'the host record')
        eq(k.got[5], false, 'no fair cache'); eq(k.got[6], false, 'no back')
        put(k, 'back', 5); put(k, 'left', 60)
        eq(k.at.left, 60, 'a write replaces the field read')
        eq(k.all[2], 60, 'in the fields as read, in place')
        eq(k.all[10], 5, 'a new field after them')
        eq(field_count(k, 'k', true), 5, 'counted with the new field')
        eq(#all_fields(k, 'k'), 10, 'the fields as read, with the writes')
        eq(called(), 'HSCAN', 'no other command for a key read whole')

        for i = 1, 20 do hset('big', 'h' .. i, '0 0 0 0 0 1') end
        hset('big', 'left', 7)
        calls = {}
        local b = read_key('big', 'h3')
        eq(b.all, nil, 'a large key is not whole'); eq(b.got[1], '7', 'read by name')
        eq(b.got[4], '0 0 0 0 0 1', 'its host record by name')
        put(b, 'back', 1)
        eq(field_count(b, 'big', true), 22, 'HLEN, and the back field written after it')
        eq(field_count(b, 'big', false), 21, 'HLEN alone')
        eq(called(), 'HSCAN HMGET HLEN HLEN', 'by name, then counted')
        "#,
    );
}

#[test]
fn a_host_on_another_slicing_is_sent_to_the_shape() {
    run(
        &["15-shape.lua"],
        r#"
        local shaped, mismatch, keeps, to = check_shape(false, 's', 1000, 1000, 4000, true)
        eq(shaped, 0, 'by the record: no shape'); eq(to, nil, 'goes on'); eq(called(), '', 'no call')

        shaped, mismatch, keeps, to = check_shape(false, 'u', 500, 1000, 4000, false)
        eq(to[1], 1000, 'no shape yet, another host\'s slicing: sent to its own')
        eq(called(), 'GET', 'nothing set')

        calls = {}
        shaped, mismatch, keeps, to = check_shape(false, 's', 1000, 1000, 4000, false)
        eq(shaped, 1000, 'the first host sets the shape'); eq(called(), 'GET SET', 'set with its TTL')
        eq(full(#full_calls), 'SET s 1000 PX 4000', 'its slicing, for the TTL sent')
        eq(keeps, false, 'set, not renewed')

        calls = {}
        local marked = '1 1 1 1 0 1 0 0 0 0 0 0 1000'
        shaped, mismatch, keeps, to = check_shape(marked, 's', 1000, 1000, 4000, false)
        eq(shaped, 1000, 'checked earlier in the slice'); eq(called(), '', 'not again')

        calls = {}
        shaped, mismatch, keeps, to = check_shape(false, 's', 1000, 1000, 4000, false)
        eq(keeps, true, 'its own shape: renewed'); eq(called(), 'GET', 'read once')

        shaped, mismatch, keeps, to = check_shape(false, 's', 500, 500, 4000, false)
        eq(to[1], 1000, 'another slicing is sent the shape')

        shaped, mismatch, keeps, to = check_shape(false, 's', 1000, 500, 4000, false)
        eq(mismatch, 1, 'spending by the shape, not its own'); eq(to, nil, 'goes on')
        eq(shaped, 0, 'not its own slicing')

        set('t', 250)
        shaped, mismatch, keeps, to = check_shape(false, 't', 1000, 1000, 4000, false)
        eq(to[1], 250, 'sent to the shape set')
        "#,
    );
}

#[test]
fn a_new_key_carries_in_the_hosts_that_asked_before() {
    run(
        &["10-read.lua", "20-create.lua"],
        r#"
        -- Asked (2nd field) and with demand (6th): carried; else not.
        hset('prev', 'left', 0, 'quota', 100, 'demand', 300,
          'a', '50 60 50 50 -7 120', 'b', '10 0 10 10 0 40', 'c', '40 45 40 40 3 180')
        local k = read_key('now', 'c')
        local left, demands, rec, created = open_key(k, 'now', 'prev', 'c', false, 100, 4000)
        eq(left, 100, 'created at the threshold'); eq(created, 1, 'created here')
        eq(demands, 300, 'the demands of the hosts carried in')
        eq(rec, '0 0 0 0 3 180', 'the host starts from its carried record')
        eq(hget('now', 'a'), '0 0 0 0 -7 120', 'a host carried with its offset and demand')
        eq(hget('now', 'b'), nil, 'a host that asked nothing is not carried')
        eq(k.n, 5, 'the writes applied to the key as read')
        eq(called(), 'HSCAN HGETALL HSET PEXPIRE', 'a TTL for a key created')
        eq(full(#full_calls), 'PEXPIRE now 4000', 'the TTL sent')

        hset('ahead', 'left', 80, 'quota', 80)
        calls = {}
        local w = read_key('ahead', 'a')
        left, demands, rec, created = open_key(w, 'ahead', 'prev', 'a', false, 100, 4000)
        eq(left, 80, 'a key written ahead keeps its quota'); eq(created, 0, 'not created')
        eq(called(), 'HSCAN HGETALL HSET', 'its TTL is the manager\'s')

        hset('bad', 'left', 'x', 'quota', 80)
        local reply
        left, demands, rec, created, reply = open_key(read_key('bad', 'a'), 'bad', 'prev', 'a', false, 100, 4000)
        eq(left, nil, 'refused')
        assert(string.find(reply.err, 'does not hold an integer'), 'an error reply')
        "#,
    );
}

#[test]
fn a_give_back_goes_back_once_and_never_past_the_charge() {
    run(
        &["30-give-back.lua"],
        r#"
        local given, told, before = gave_back(100, '30', 10)
        eq(given, 30, 'what it sent'); eq(told, 10, 'what the key was told'); eq(before, false, 'a known record')
        given = gave_back(100, '500', 0); eq(given, 100, 'never more than the claim')
        given = gave_back(100, '-5', 0); eq(given, 0, 'never below 0')
        given = gave_back(100, nil, 0); eq(given, 0, 'an older host sends nothing')
        given, told, before = gave_back(100, '30', nil)
        eq(told, 30, 'a record of an older script: counted as told'); eq(before, true, 'and said so')

        -- Charged 100, holds 70 (claimed 100, gave back 30), told 10: 20 go back.
        local left, charged, now_told, back = put_back(30, 10, 100, 70, 500, 1000)
        eq(back, 20, 'what it was not told of'); eq(left, 520, 'into the key')
        eq(charged, 80, 'no longer charged'); eq(now_told, 30, 'told now')
        left, charged, now_told, back = put_back(30, now_told, charged, 70, left, 1000)
        eq(back, 0, 'once'); eq(left, 520, 'the key unchanged')
        -- A key created anew charged only what the host holds: nothing back.
        left, charged, now_told, back = put_back(30, 0, 70, 70, 500, 1000)
        eq(back, 0, 'nothing past the charge'); eq(now_told, 30, 'but told')
        left = put_back(50, 0, 100, 50, 990, 1000)
        eq(left, 1000, 'never past the quota')
        -- A damaged number fails every comparison: nothing goes back.
        left, charged, now_told, back = put_back(0 / 0, 10, 100, 70, 500, 1000)
        eq(back, 0, 'NaN given: nothing back'); eq(left, 500, 'the key unchanged')
        "#,
    );
}

#[test]
fn the_fair_tails_owe_each_host_its_share_as_the_slice_is_released() {
    run(
        &["40-fair.lua"],
        r#"
        local function ask(t)
          local s = {quota = 1000, demands = 1200, hosts = 2, burst = 0, elapsed = 500,
            slice_ms = 1000, demand = 600, had = 0, grant = 100, room = 400, left = 1000,
            cache = false,
            host = 'a', records = function()
              -- The host's own record and the key's own fields are passed over.
              -- (b asked in the slice: a carried host that has not is gone
              -- past its first tenth.)
              return {'a', '0 0 0 0 0 600', 'left', '5', 'b', '0 1 0 0 0 600', 'quota', '1000'}
            end}
          for f, v in pairs(t) do s[f] = v end
          return fair_room(s)
        end
        local room, cut, shared, mine = ask({demands = 900})
        eq(shared, false, 'demand under the slice: not shared'); eq(room, 400, 'the release')
        eq(mine, 0, 'nobody owed')

        -- Half the slice released: each is owed half its share (250).
        room, cut, shared, mine = ask({had = 300})
        eq(shared, true, 'shared out'); eq(mine, 0, 'past its due')
        eq(room, 150, 'only what the other host is not owed'); eq(cut, true, 'cut')
        room, cut, shared, mine = ask({had = 100})
        eq(mine, 150, 'behind: owed the rest of its due'); eq(room, 400, 'served whole')
        eq(cut, false, 'not cut')

        -- The burst is everyone's share while few hosts share it.
        room, cut, shared, mine = ask({had = 300, burst = 200})
        eq(mine, 50, 'owed its share of the burst too')

        -- Past 100 hosts the burst is not owed ahead: owed as time passes.
        local function fleet(n)
          return function()
            local all = {}
            for i = 1, n do all[#all + 1] = 'h' .. i; all[#all + 1] = '0 1 0 0 0 600' end
            return all
          end
        end
        room, cut, shared, mine = ask({hosts = 100, burst = 200, records = fleet(99)})
        eq(mine, 7, 'up to 100 hosts: a tenth of 1,000 at 0.5 and the burst\'s 0.2')
        room, cut, shared, mine = ask({hosts = 150, burst = 200, records = fleet(149)})
        eq(mine, 3, 'past 100: a 150th at 0.5 alone')

        -- Hosts carried in from the last slice that have not asked in this
        -- one: owed their due in its first tenth, nothing after it.
        local function carried()
          local all = {}
          for i = 1, 10 do all[#all + 1] = 'c' .. i; all[#all + 1] = '0 0 0 0 0 1000' end
          return all
        end
        local gone = {demands = 11000, hosts = 11, demand = 1000, had = 100, left = 900,
          records = carried}
        room = ask(gone)
        eq(room, 400, 'gone: the release, all of it')
        gone.elapsed, gone.had = 60, 0
        room, cut = ask(gone)
        eq(cut, true, 'in the first tenth: held for them')

        -- Below the level: owed its next chunk ahead (5/12 of a slice).
        room, cut, shared, mine = ask({demand = 120, had = 0, elapsed = 0, grant = 100})
        eq(mine, math.floor(120 * AHEAD), '5/12 of a small demand at once')
        eq(AHEAD, 1 / 3 + 1 / 12, 'a third of a slice, and the quarter of one left at the ask')

        -- Past 64 hosts the pass over the records is kept a tenth of a slice.
        local read = 0
        local function records() read = read + 1; return {} end
        local cache = '450,100,500,0,800,500,0,0'
        room, cut = ask({hosts = 80, cache = cache, had = 900, records = records})
        eq(read, 0, 'a fresh cache stands for the records')
        -- Owed then 100, grown by 500 a slice over 50 ms since: 124 (floored
        -- from 24.99: 0.5 - 0.45 in binary).
        eq(room, 276, 'the release less what the cache says the others are owed now')
        eq(cut, true, 'cut')
        -- Past its entitlement (900 had of a level of 500): only what the
        -- others' rests leave of the key (1,000 left, 900 theirs, 50 since
        -- granted within them).
        local _, _, _, _, _, rest, most = ask({hosts = 80, records = records, had = 900,
          cache = '450,100,500,0,800,500,900,50'})
        eq(rest, 0, 'nothing left of its own'); eq(most, 150, 'what the others leave')
        room, cut = ask({hosts = 80, records = records, had = 900,
          cache = '450,100,500,0,800,500,900,50'})
        eq(room, 150, 'cut to that'); eq(cut, true, 'cut')
        -- A cache of an older script (five numbers) is made again.
        ask({hosts = 80, cache = '450,100,500,0,800', had = 900, records = records})
        eq(read, 1, 'an older cache: the records read'); read = 0
        local _, _, _, _, c = ask({hosts = 80, cache = '350,100,500,0,800,500,2000,0', had = 900, records = records})
        eq(read, 1, 'an old one is made again'); eq(c[1], 500, 'at this time')
        ask({hosts = 40, cache = cache, had = 900, records = records})
        eq(read, 2, 'up to 64 hosts, every time')

        -- A damaged number fails every comparison, as it always did.
        room, cut, shared = ask({demands = 0 / 0})
        eq(shared, false, 'NaN demands: not shared out'); eq(room, 400, 'the release')
        room, cut = ask({grant = 0 / 0})
        eq(cut, false, 'NaN grant: not cut'); eq(room, 400, 'the release')

        local f = fair_field({500, 100, 0, 20, 800}, true, 30, 10)
        eq(f[2], '500,100,0,30,800', 'the grant within what is owed is counted')
        eq(#fair_field({}, true, 30, 10), 0, 'no cache, no field')
        f = fair_field({500, 100, 0, 20, 800, 400, 900, 50}, true, 30, 10, 25)
        eq(f[2], '500,100,0,30,800,400,900,75', 'and the grant within its rest')

        -- The water level: the small demands whole, the rest shared evenly.
        eq(water_level({100, 900, 600, 50}, 1000), 425, 'between the small and the big')
        eq(water_level({300, 300}, 1000), 1000, 'demands within the slice: no level')
        eq(water_level({600, 600}, 1000), 500, 'equal demands: an equal share')
        eq(rest_of(1000, 500, 100), 400, 'the level less what it had')
        eq(rest_of(300, 500, 100), 200, 'below the level: its demand less what it had')
        eq(rest_of(1000, 500, 600), 0, 'past it: none')
        "#,
    );
}

#[test]
fn reservations_only_past_many_hosts_and_only_what_is_spent() {
    run(
        &["50-reserve.lua"],
        r#"
        eq(owed_at_once(10, 50, 60, true, 101, true), 50, 'owed its whole ask: not queued')
        eq(owed_at_once(10, 50, 40, true, 101, true), 40, 'owed most of its ask: that at once')
        eq(owed_at_once(10, 50, 20, true, 101, true), 10, 'owed under half its ask: queued')
        eq(owed_at_once(10, 50, 60, true, 100, true), 10, 'up to 100 hosts: no queue to skip')
        eq(owed_at_once(10, 50, 60, false, 101, true), 10, 'a host that keeps no reservation')

        -- reserve(can_keep, hosts, grant, wait, want, left, demand, elapsed, slice_ms)
        local g, usable = reserve(true, 150, 0, 100, 40, 1000, 800, 200, 1000)
        eq(g, 40, 'its ask, now'); eq(usable, 100, 'usable after the wait')
        g, usable = reserve(true, 100, 0, 100, 40, 1000, 800, 200, 1000)
        eq(g, 0, 'up to 100 hosts: refused'); eq(usable, 0, 'nothing to wait for')
        g = reserve(false, 150, 0, 100, 40, 1000, 800, 200, 1000)
        eq(g, 0, 'a host that cannot keep one')
        g = reserve(true, 150, 0, 100, 40, 15, 800, 200, 1000)
        eq(g, 0, 'less than half an ask left')
        g = reserve(true, 150, 0, 100, 40, 1000, 40, 200, 1000)
        eq(g, 28, 'what it spends by the slice end at its demand, most of its ask')
        g = reserve(true, 150, 0, 100, 40, 1000, 30, 200, 1000)
        eq(g, 0, 'not most of its ask spent by the slice end at its demand')
        g, usable = reserve(true, 150, 7, 0, 40, 1000, 800, 200, 1000)
        eq(g, 7, 'a grant is left as it is'); eq(usable, 0, 'usable at once')
        -- The fair tails' most (rest, most): no further than they let it take.
        g = reserve(true, 150, 0, 100, 40, 1000, 800, 200, 1000, 30, 30)
        eq(g, 30, 'the rest of its entitlement')
        g = reserve(true, 150, 0, 100, 40, 1000, 800, 200, 1000, 5, 5)
        eq(g, 5, 'a rest under half an ask is worth reserving')
        g = reserve(true, 150, 0, 100, 40, 1000, 800, 200, 1000, 0, 0)
        eq(g, 0, 'past its entitlement, nothing beyond the others\' rests')
        g = reserve(true, 150, 0, 100, 40, 1000, 800, 200, 1000, 0, 15)
        eq(g, 0, 'past it, less than half an ask beyond them')
        "#,
    );
}

#[test]
fn a_host_waits_for_an_ask_worth_a_round_trip() {
    run(
        &["60-wait.lua"],
        r#"
        local function wait(t)
          local w = {quota = 1000, left = 800, grant = 0, want = 100, released = 200, burst = 100,
            elapsed = 100, slice_ms = 1000, owed_cut = false, shared_out = false, demand = 0,
            given = 0, giving_back = false, back = 0, hosts = 2}
          for f, v in pairs(t) do w[f] = v end
          return wait_for(w)
        end
        eq(wait({}), 100, 'until another full ask is released')
        eq(wait({grant = 100, released = 400, left = 700}), 300, 'served: told when its next ask is')
        eq(wait({grant = 100, released = 1000, left = 700}), 0, 'and none when it is released')
        eq(wait({want = 400, released = 1000}), 0, 'released: no wait')
        eq(wait({want = 400, released = 1000, owed_cut = true}), 200,
          'held back for the others: until another half ask is released')
        eq(wait({want = 400, released = 1000, owed_cut = true, elapsed = 980}), 20,
          'never past the slice')
        eq(wait({want = 0}), 0, 'a give-back\'s own pull')
        eq(wait({pace = 34}), 34, 'a shard: until the ask\'s share of it is released')
        eq(wait({want = 400, pace = 134, released = 1000, owed_cut = true}), 67,
          'and half of that share when held back')
        eq(wait({shared_out = true, demand = 400}), 125, 'shared out: until half an ask at its demand')
        eq(wait({shared_out = true, demand = 100}), 250, 'a quarter at most')
        eq(wait({shared_out = true, demand = 100, given = 5}), 125, 'an eighth after a give-back')
        eq(wait({shared_out = true, demand = 2000}), 100, 'a fast host: the release\'s wait')
        local used = {left = 0, giving_back = true}
        eq(wait(used), 100, 'used up: again in a tenth, for what hosts give back')
        used.hosts = 101
        eq(wait(used), 0, 'past 100 hosts, not before some host gave back')
        used.back = 3
        eq(wait(used), 100, 'and once one did')

        -- done_for_slice(rest, most, level, demand, grant, left, elapsed, slice_ms)
        eq(done_for_slice(40, 40, 400, 500, 40, 900, 500, 1000), true, 'granted its whole rest')
        eq(done_for_slice(0, 0, 400, 500, 0, 900, 500, 1000), true, 'past it, nothing beyond')
        eq(done_for_slice(40, 60, 400, 500, 40, 900, 500, 1000), false, 'more beyond the others\' rests')
        eq(done_for_slice(40, 40, 400, 500, 30, 900, 500, 1000), false, 'granted part of it')
        eq(done_for_slice(40, 40, 400, 500, 40, 900, 50, 1000), false, 'in the first tenth')
        eq(done_for_slice(40, 40, 400, 300, 40, 900, 500, 1000), false, 'below the level')
        eq(done_for_slice(0, 0, 400, 0, 0, 900, 500, 1000), false, 'no demand reported yet')
        eq(done_for_slice(nil, nil, nil, 500, 40, 900, 500, 1000), false, 'no level known')
        "#,
    );
}
