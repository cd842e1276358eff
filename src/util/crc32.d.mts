/** crc32(bytes, previous = 0): the CRC-32 of `bytes`, continuing from `previous`. */
export declare const crc32: (data: Uint8Array | string, value?: number) => number;
/** Whether crc32 is the native one (zlib's can be several times slower: worth avoiding on the event loop). */
export declare const crc32IsNative: boolean;
