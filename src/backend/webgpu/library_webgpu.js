// forge's WebGPU glue (emcc --js-library): the calls src/backend/webgpu/ makes, on the
// GPUDevice the page or the node test acquired before starting the module
// (Module.forgeGpuDevice, with Module.forgeGpuAdapterName). Buffers and pipelines are u32
// handles into tables. Dispatches go into one compute pass; each gets its parameters as a
// 256-byte slot of one uniform arena (a dynamic offset), written once per submission, and a
// bind group kept per pipeline and set of buffers. Reads copy into a
// mapped staging buffer and map it; forge_wgpu_read_wait is the one asynchronous import
// (ASYNCIFY) and returns at once when the map has completed already.
mergeInto(LibraryManager.library, {
  $FW: {
    device: null,
    buffers: [null],
    freeBufferIds: [],
    pipelines: [null],
    encoder: null,
    pass: null,
    arena: null,
    arenaBytes: 1 << 20,
    staged: null,     // Uint32Array of the arena's next contents
    stagedSlots: 0,   // 256-byte slots used by the open encoder
    reads: {},
    nextTicket: 1,
    submits: 0,
    dispatches: 0,
    readCount: 0,
    error: '',
    init: function() {
      if (FW.device) return;
      var d = Module['forgeGpuDevice'];
      if (!d) throw new Error('forge: Module.forgeGpuDevice is not set');
      FW.device = d;
      FW.arena = d.createBuffer({size: FW.arenaBytes, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST});
      FW.staged = new Uint32Array(FW.arenaBytes / 4);
      d.addEventListener('uncapturederror', function(e) {
        if (!FW.error) FW.error = e.error && e.error.message ? e.error.message : String(e.error);
      });
    },
    passOf: function() {
      if (!FW.encoder) FW.encoder = FW.device.createCommandEncoder();
      if (!FW.pass) FW.pass = FW.encoder.beginComputePass();
      return FW.pass;
    },
    endPass: function() {
      if (FW.pass) { FW.pass.end(); FW.pass = null; }
    },
    flush: function() {
      FW.endPass();
      if (!FW.encoder) return;
      if (FW.stagedSlots > 0)
        FW.device.queue.writeBuffer(FW.arena, 0, FW.staged.buffer, 0, FW.stagedSlots * 256);
      FW.device.queue.submit([FW.encoder.finish()]);
      FW.encoder = null;
      FW.stagedSlots = 0;
      FW.submits++;
    },
  },

  forge_wgpu_available__deps: ['$FW'],
  forge_wgpu_available: function() { return Module['forgeGpuDevice'] ? 1 : 0; },

  forge_wgpu_adapter_name__deps: ['$FW'],
  forge_wgpu_adapter_name: function(dst, cap) {
    stringToUTF8(String(Module['forgeGpuAdapterName'] || 'WebGPU'), dst, cap);
  },

  // limits: f64 [maxStorageBufferBindingSize, maxBufferSize, maxStorageBuffersPerShaderStage,
  // maxComputeWorkgroupStorageSize, maxComputeInvocationsPerWorkgroup,
  // maxComputeWorkgroupsPerDimension, minStorageBufferOffsetAlignment, shader-f16, subgroups]
  forge_wgpu_limits__deps: ['$FW'],
  forge_wgpu_limits: function(dst) {
    FW.init();
    var L = FW.device.limits, f = FW.device.features;
    var v = [L.maxStorageBufferBindingSize, L.maxBufferSize, L.maxStorageBuffersPerShaderStage,
             L.maxComputeWorkgroupStorageSize, L.maxComputeInvocationsPerWorkgroup,
             L.maxComputeWorkgroupsPerDimension, L.minStorageBufferOffsetAlignment,
             f.has('shader-f16') ? 1 : 0, f.has('subgroups') ? 1 : 0];
    for (var i = 0; i < v.length; i++) HEAPF64[(dst >> 3) + i] = v[i];
  },

  forge_wgpu_buffer_create__deps: ['$FW'],
  forge_wgpu_buffer_create: function(bytes) {
    FW.init();
    var b = FW.device.createBuffer({size: bytes, usage: GPUBufferUsage.STORAGE |
                                   GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST});
    var id = FW.freeBufferIds.length ? FW.freeBufferIds.pop() : FW.buffers.length;
    FW.buffers[id] = b;
    return id;
  },

  // After the work queued so far (a buffer an unsubmitted pass uses may not be destroyed).
  forge_wgpu_buffer_destroy__deps: ['$FW'],
  forge_wgpu_buffer_destroy: function(id) {
    FW.flush();
    for (var i = 1; i < FW.pipelines.length; i++) FW.pipelines[i].groups.clear();
    FW.buffers[id].destroy();
    FW.buffers[id] = null;
    FW.freeBufferIds.push(id);
  },

  // queue.writeBuffer runs before any unsubmitted pass: submit those first, so the write
  // lands after the work queued before it. offset and bytes: multiples of 4.
  forge_wgpu_buffer_write__deps: ['$FW'],
  forge_wgpu_buffer_write: function(id, offset, src, bytes) {
    FW.flush();
    FW.device.queue.writeBuffer(FW.buffers[id], offset, HEAPU8.buffer, src, bytes);
  },

  // offsets and bytes: multiples of 4.
  forge_wgpu_buffer_copy__deps: ['$FW'],
  forge_wgpu_buffer_copy: function(src, src_offset, dst, dst_offset, bytes) {
    FW.endPass();
    if (!FW.encoder) FW.encoder = FW.device.createCommandEncoder();
    FW.encoder.copyBufferToBuffer(FW.buffers[src], src_offset, FW.buffers[dst], dst_offset, bytes);
  },

  forge_wgpu_buffer_fill_zero__deps: ['$FW'],
  forge_wgpu_buffer_fill_zero: function(id, offset, bytes) {
    FW.endPass();
    if (!FW.encoder) FW.encoder = FW.device.createCommandEncoder();
    FW.encoder.clearBuffer(FW.buffers[id], offset, bytes);
  },

  // The pipeline's layout is written out, not 'auto': binding 0 (the parameters) takes a
  // dynamic offset, so that a dispatch's bind group depends on its buffers alone and is made
  // once per set of buffers (a decode step binds the same pooled buffers at every token).
  forge_wgpu_pipeline__deps: ['$FW'],
  forge_wgpu_pipeline: function(code) {
    FW.init();
    var text = UTF8ToString(code);
    var entries = [{binding: 0, visibility: GPUShaderStage.COMPUTE,
                    buffer: {type: 'uniform', hasDynamicOffset: true}}];
    var re = /@binding\((\d+)\)\s*var<storage,\s*(read_write|read)>/g, m;
    while ((m = re.exec(text)) !== null)
      entries.push({binding: Number(m[1]), visibility: GPUShaderStage.COMPUTE,
                    buffer: {type: m[2] === 'read' ? 'read-only-storage' : 'storage'}});
    var layout = FW.device.createBindGroupLayout({entries: entries});
    var module = FW.device.createShaderModule({code: text});
    var p = FW.device.createComputePipeline({
      layout: FW.device.createPipelineLayout({bindGroupLayouts: [layout]}),
      compute: {module: module, entryPoint: 'main'}});
    FW.pipelines.push({pipeline: p, layout: layout, groups: new Map()});
    return FW.pipelines.length - 1;
  },

  // binds: u32 triples (buffer, offset, size) for bindings 1..n; params: `words` u32s for
  // binding 0 (<= 64).
  forge_wgpu_dispatch__deps: ['$FW'],
  forge_wgpu_dispatch: function(pipeline, binds, n, params, words, x, y, z) {
    if (FW.stagedSlots * 256 >= FW.arenaBytes) FW.flush();
    var slot = FW.stagedSlots++;
    FW.staged.set(HEAPU32.subarray(params >> 2, (params >> 2) + words), slot * 64);
    var p = FW.pipelines[pipeline];
    var b0 = binds >> 2;
    var key = HEAPU32.subarray(b0, b0 + 3 * n).join(',');
    var group = p.groups.get(key);
    if (!group) {
      var entries = [{binding: 0, resource: {buffer: FW.arena, offset: 0, size: 256}}];
      for (var i = 0; i < n; i++) {
        var at = b0 + 3 * i;
        entries.push({binding: i + 1, resource: {buffer: FW.buffers[HEAPU32[at]],
                                                 offset: HEAPU32[at + 1], size: HEAPU32[at + 2]}});
      }
      if (p.groups.size >= 512) p.groups.clear();  // bounded: old sets of buffers go
      group = FW.device.createBindGroup({layout: p.layout, entries: entries});
      p.groups.set(key, group);
    }
    var pass = FW.passOf();
    pass.setPipeline(p.pipeline);
    pass.setBindGroup(0, group, [slot * 256]);
    pass.dispatchWorkgroups(x, y, z);
    FW.dispatches++;
  },

  forge_wgpu_flush__deps: ['$FW'],
  forge_wgpu_flush: function() { FW.flush(); },

  // Copies [offset, offset + bytes) (multiples of 4) behind the queued work into a staging
  // buffer, submits, and maps it; returns a ticket for forge_wgpu_read_wait.
  forge_wgpu_read_start__deps: ['$FW'],
  forge_wgpu_read_start: function(id, offset, bytes) {
    var staging = FW.device.createBuffer({size: bytes, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST});
    FW.endPass();
    if (!FW.encoder) FW.encoder = FW.device.createCommandEncoder();
    FW.encoder.copyBufferToBuffer(FW.buffers[id], offset, staging, 0, bytes);
    FW.flush();
    var ticket = FW.nextTicket++;
    FW.readCount++;
    var r = {staging: staging, done: false, failed: ''};
    r.promise = staging.mapAsync(GPUMapMode.READ).then(function() { r.done = true; },
                                                       function(e) { r.done = true; r.failed = String(e); });
    FW.reads[ticket] = r;
    return ticket;
  },

  // Waits for the ticket's map and copies its bytes to dst. 0, or -1 when the map failed
  // (forge_wgpu_error says why).
  forge_wgpu_read_wait__deps: ['$FW'],
  forge_wgpu_read_wait: function(ticket, dst, bytes) {
    var finish = function() {
      var r = FW.reads[ticket];
      delete FW.reads[ticket];
      if (r.failed) {
        if (!FW.error) FW.error = 'mapAsync failed: ' + r.failed;
        r.staging.destroy();
        return -1;
      }
      HEAPU8.set(new Uint8Array(r.staging.getMappedRange(0, bytes)), dst);
      r.staging.unmap();
      r.staging.destroy();
      return 0;
    };
    // ASYNCIFY calls this import again when it resumes the wasm stack: then only
    // handleAsync's stored result counts (the read is gone by then).
    if (Asyncify.state !== Asyncify.State.Rewinding && FW.reads[ticket].done) return finish();
    // Resumed on a task of its own: Dawn for Node resolves map promises while it holds a
    // lock, and the wasm code resumed in that microtask would call into Dawn again.
    var later = typeof setImmediate === 'function' ? setImmediate : function(f) { setTimeout(f, 0); };
    return Asyncify.handleAsync(function() {
      return FW.reads[ticket].promise.then(function() {
        return new Promise(function(res) { later(res); });
      }).then(finish);
    });
  },

  // The first error the device reported since the last call (validation, out of memory, a
  // lost device), or "".
  forge_wgpu_error__deps: ['$FW'],
  forge_wgpu_error: function(dst, cap) {
    var e = FW.error;
    FW.error = '';
    stringToUTF8(e, dst, cap);
    return e ? 1 : 0;
  },

  // [submits, dispatches, reads]
  forge_wgpu_counts__deps: ['$FW'],
  forge_wgpu_counts: function(dst) {
    HEAPF64[dst >> 3] = FW.submits;
    HEAPF64[(dst >> 3) + 1] = FW.dispatches;
    HEAPF64[(dst >> 3) + 2] = FW.readCount;
  },
});
