// The worker's cache of served model files in the origin private file system (OPFS):
// forge-models/<key>/<file>, where the key names the model and the version of its files
// (their names, sizes and modification times), so a changed model is downloaded again and the
// old copy removed. A cached file counts only when its size is the manifest's: a download
// cut short is fetched again. Without OPFS (storage blocked) files are fetched into memory.
'use strict';

const ModelCache = (() => {
  const TOP = 'forge-models';

  function keyOf(manifest) {
    const safe = String(manifest.name).replace(/[^A-Za-z0-9._-]+/g, '_').slice(0, 80) || 'model';
    return `${safe}-${manifest.version}`;
  }

  async function directory(manifest) {
    if (!self.navigator.storage || !navigator.storage.getDirectory) return null;
    try {
      const root = await navigator.storage.getDirectory();
      const top = await root.getDirectoryHandle(TOP, { create: true });
      const key = keyOf(manifest);
      const prefix = key.slice(0, key.lastIndexOf('-') + 1);
      for await (const [name] of top.entries()) {
        if (name !== key && name.startsWith(prefix)) await top.removeEntry(name, { recursive: true });
      }
      return await top.getDirectoryHandle(key, { create: true });
    } catch (e) {
      return null;  // no OPFS here (private window, blocked storage): download into memory
    }
  }

  async function cached(dir, entry) {
    try {
      const file = await (await dir.getFileHandle(entry.name)).getFile();
      return file.size === entry.size ? file : null;
    } catch (e) {
      return null;
    }
  }

  // Streams a served file into OPFS (or memory), reporting each chunk's bytes.
  async function download(dir, entry, onBytes) {
    const response = await fetch('model/files/' + encodeURIComponent(entry.name));
    if (!response.ok) throw new Error(`the server answered ${response.status} for ${entry.name}`);
    const reader = response.body.getReader();
    const writable = dir ? await (await dir.getFileHandle(entry.name, { create: true })).createWritable() : null;
    const chunks = [];
    let got = 0;
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        if (writable) await writable.write(value); else chunks.push(value);
        got += value.length;
        onBytes(value.length);
      }
      if (got !== entry.size) throw new Error(`${entry.name}: received ${got} bytes of ${entry.size}`);
      if (writable) await writable.close();
    } catch (e) {
      if (writable) await writable.abort().catch(() => {});
      throw e;
    }
    return writable ? (await dir.getFileHandle(entry.name)).getFile() : new Blob(chunks);
  }

  // The manifest's files as [{name, blob}], from the cache or downloaded. onProgress(done,
  // total) counts bytes; the result says how many bytes came over the network.
  async function files(manifest, onProgress) {
    const dir = await directory(manifest);
    const total = manifest.files.reduce((n, f) => n + f.size, 0);
    let done = 0, fetched = 0;
    const out = [];
    for (const entry of manifest.files) {
      let blob = dir ? await cached(dir, entry) : null;
      if (blob) {
        done += entry.size;
        onProgress(done, total);
      } else {
        blob = await download(dir, entry, (n) => { done += n; fetched += n; onProgress(done, total); });
      }
      out.push({ name: entry.name, blob });
    }
    return { files: out, fetched, cached: dir !== null };
  }

  return { files };
})();
