;; device-version: 9.0.0
;; Attack: built against tfwasm:device@9.0.0, a version this host does not
;; speak. Otherwise the honest device. The host must refuse it at load and
;; say which version it exports and which it speaks.
(module
  (memory (export "memory") 1)
  (global $heap (mut i32) (i32.const 4096))
  (global $region (mut i64) (i64.const 0))
  (global $next (mut i64) (i64.const 0))
  (data (i32.const 2048) "tfwasm hostile WAT device")
  (data (i32.const 2080) "tfwasm tests")

  ;; Memory for the host's arguments, from 4096 on.
  (func (export "cabi_realloc") (param $old i32) (param $old_size i32) (param $align i32) (param $size i32)
    (result i32)
    (local $p i32)
    (local.set $p (i32.and (i32.add (global.get $heap) (i32.sub (local.get $align) (i32.const 1)))
                           (i32.sub (i32.const 0) (local.get $align))))
    (global.set $heap (i32.add (local.get $p) (local.get $size)))
    (if (i32.gt_u (global.get $heap) (i32.shl (memory.size) (i32.const 16)))
      (then (drop (memory.grow (i32.add (i32.shr_u (global.get $heap) (i32.const 16)) (i32.const 1))))))
    (local.get $p))

  ;; identity.init: ok(device-info) with the two strings at 2048.
  (func (export "tfwasm:device/identity@9.0.0#init") (param $ordinal i32) (param $memory_size i64)
    (param $options i32) (param $count i32) (result i32)
    (global.set $region (local.get $memory_size))
    (i32.store8 (i32.const 1024) (i32.const 0))
    (i32.store (i32.const 1032) (i32.const 2048)) (i32.store (i32.const 1036) (i32.const 25))
    (i32.store (i32.const 1040) (i32.const 2080)) (i32.store (i32.const 1044) (i32.const 12))
    (i32.store (i32.const 1048) (i32.const 0)) (i32.store (i32.const 1052) (i32.const 0))
    (i32.store (i32.const 1056) (i32.const -1))
    (i64.store (i32.const 1064) (i64.const 1000000000))
    (f64.store (i32.const 1072) (f64.const 1))
    (i32.const 1024))

  ;; memory.allocate: the next aligned offset, or out-of-memory.
  (func (export "tfwasm:device/memory@9.0.0#allocate") (param $size i64) (param $align i64) (result i32)
    (local $offset i64)
    (local.set $offset (i64.and (i64.add (global.get $next) (i64.sub (local.get $align) (i64.const 1)))
                                (i64.sub (i64.const 0) (local.get $align))))
    (if (i64.gt_u (i64.add (local.get $offset) (local.get $size)) (global.get $region))
      (then
        (i32.store8 (i32.const 1024) (i32.const 1))
        (i32.store8 (i32.const 1032) (i32.const 0))
        (i64.store (i32.const 1040) (local.get $size))
        (return (i32.const 1024))))
    (global.set $next (i64.add (local.get $offset) (local.get $size)))
    (i32.store8 (i32.const 1024) (i32.const 0))
    (i64.store (i32.const 1032) (local.get $offset))
    (i32.const 1024))

  ;; memory.usage: every byte placed so far is in use.
  (func (export "tfwasm:device/memory@9.0.0#usage") (result i32)
    (i64.store (i32.const 1024) (global.get $next))
    (i64.store (i32.const 1032) (global.get $next))
    (i64.store (i32.const 1040) (i64.const 0))
    (i64.store (i32.const 1048) (i64.const 0))
    (i64.store (i32.const 1056) (i64.sub (global.get $region) (global.get $next)))
    (i64.store (i32.const 1064) (global.get $region))
    (i32.const 1024))

  ;; memory.adopt: place later allocations after every adopted one.
  (func (export "tfwasm:device/memory@9.0.0#adopt") (param $live i32) (param $count i32) (result i32)
    (local $end i64)
    (block $done
      (loop $each
        (br_if $done (i32.eqz (local.get $count)))
        (local.set $end (i64.add (i64.load (local.get $live)) (i64.load offset=8 (local.get $live))))
        (if (i64.gt_u (local.get $end) (global.get $next)) (then (global.set $next (local.get $end))))
        (local.set $live (i32.add (local.get $live) (i32.const 16)))
        (local.set $count (i32.sub (local.get $count) (i32.const 1)))
        (br $each)))
    (call $ok))

  ;; ok(()) for result<_, device-error> and result<_, string>.
  (func $ok (result i32)
    (i32.store8 (i32.const 1024) (i32.const 0))
    (i32.const 1024))
  (func $ok_1 (param i64) (result i32) (call $ok))
  (func $ok_2 (param i64 i64) (result i32) (call $ok))
  ;; err(unknown-handle(0)): the host then manages the object itself.
  (func $refuse (result i32)
    (i32.store8 (i32.const 1024) (i32.const 1))
    (i32.store8 (i32.const 1032) (i32.const 1))
    (i64.store (i32.const 1040) (i64.const 0))
    (i32.const 1024))
  (func $refuse_submit (param i64 i32) (result i32) (call $refuse))
  (func $refuse_2 (param i64 i64) (result i32) (call $refuse))
  (func $refuse_mark (param i64 i64 i32) (result i32) (call $refuse))
  (func $unknown (param i64) (result i32) (i32.const 0))
  (func $none (param i64) (result i32)
    (i32.store8 (i32.const 1024) (i32.const 0))
    (i32.const 1024))
  (func $ignore (param i64 i64 i64 i32))

  (export "tfwasm:device/memory@9.0.0#free" (func $ok_1))
  (export "tfwasm:device/streams@9.0.0#create-stream" (func $refuse))
  (export "tfwasm:device/streams@9.0.0#destroy-stream" (func $ok_1))
  (export "tfwasm:device/streams@9.0.0#submit" (func $refuse_submit))
  (export "tfwasm:device/streams@9.0.0#complete" (func $ignore))
  (export "tfwasm:device/streams@9.0.0#add-dependency" (func $ok_2))
  (export "tfwasm:device/streams@9.0.0#stream-status" (func $ok_1))
  (export "tfwasm:device/streams@9.0.0#create-event" (func $refuse))
  (export "tfwasm:device/streams@9.0.0#destroy-event" (func $ok_1))
  (export "tfwasm:device/streams@9.0.0#record-event" (func $refuse_2))
  (export "tfwasm:device/streams@9.0.0#wait-event" (func $ok_2))
  (export "tfwasm:device/streams@9.0.0#event-status" (func $unknown))
  (export "tfwasm:device/streams@9.0.0#create-timer" (func $refuse))
  (export "tfwasm:device/streams@9.0.0#destroy-timer" (func $ok_1))
  (export "tfwasm:device/streams@9.0.0#mark-timer" (func $refuse_mark))
  (export "tfwasm:device/streams@9.0.0#timer-elapsed" (func $none))
)
