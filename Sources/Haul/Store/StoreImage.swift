import Foundation

/// A new store's file, written whole: what SQLite makes of ``StoreSchema`` (the migrations'
/// last schema, Haul's application id, every migration recorded, write-ahead logging set),
/// kept as its bytes. Making it with SQLite at a first run took a connection of its own and
/// the schema's statements compiled and run: 1.1 ms of a first `haul get` of 1 KiB (10.75
/// against 11.85 ms). `StoreCreationTests.imageIsTheSchema` makes the file with SQLite and
/// compares; when a migration changes the schema, it prints the stretches to put here.
enum StoreImage {
    /// The file's length: 19 pages of 4 KiB.
    static let size = 77_824

    /// The file's bytes other than runs of zeros: where each stretch begins, and its bytes in
    /// base64.
    static let stretches: [(offset: Int, base64: String)] = [
        (
            0,
            """
            U1FMaXRlIGZvcm1hdCAzABAAAgIAQCAgAAAAAgAAABMAAAAAAAAAAAAAAAwAAAAEAAAAAAAAAAAAAAABAAAAAAAAAABIQVVM\
            AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAACAC5jAQ0P+AASBEgAD0kPuQqsDyAKQgnVCKkJpghMB60IHQbhBjEGqgUpBgYEtgRI
            """
        ),
        (
            1_096,
            """
            bBIHFy0VAYEjaW5kZXh0YXNrX29uX3BhcnRQYXRodGFzaxNDUkVBVEUgSU5ERVggdGFza19vbl9wYXJ0UGF0aCBPTiB0YXNr\
            IChwYXJ0UGF0aCkgV0hFUkUgcGFydFBhdGggSVMgTk9UIE5VTExxEQcXPRUBgR1pbmRleHRhc2tfb25fYmFja2dyb3VuZF9z\
            dGF0ZXRhc2sSQ1JFQVRFIElOREVYICJ0YXNrX29uX2JhY2tncm91bmRfc3RhdGUiIE9OICJ0YXNrIigiYmFja2dyb3VuZCIs\
            ICJzdGF0ZSIpgVoPBxcXFwGDE3RhYmxlcGllY2VwaWVjZRBDUkVBVEUgVEFCTEUgInBpZWNlIiAoInRhc2tJRCIgVEVYVCBQ\
            UklNQVJZIEtFWSBOT1QgTlVMTCBSRUZFUkVOQ0VTICJ0YXNrIigiaWQiKSBPTiBERUxFVEUgQ0FTQ0FERSwgImFsZ29yaXRo\
            bSIgVEVYVCBOT1QgTlVMTCwgImxlbmd0aCIgSU5URUdFUiBOT1QgTlVMTCwgImRpZ2VzdHMiIEJMT0IgTk9UIE5VTEwsICJ2\
            ZXJpZmllZCIgQkxPQikpEAYXPRcBAGluZGV4c3FsaXRlX2F1dG9pbmRleF9waWVjZV8xcGllY2URdw0HFyMjAYE1dGFibGV0\
            ZXh0U2V0dGluZ3RleHRTZXR0aW5nDkNSRUFURSBUQUJMRSAidGV4dFNldHRpbmciICgibmFtZSIgVEVYVCBQUklNQVJZIEtF\
            WSBOT1QgTlVMTCwgInZhbHVlIiBURVhUIE5PVCBOVUxMKTUOBhdJIwEAaW5kZXhzcWxpdGVfYXV0b2luZGV4X3RleHRTZXR0\
            aW5nXzF0ZXh0U2V0dGluZw+BSQwHFz0VAYJNaW5kZXh0YXNrX29uZV9wZXJfZGVzdGluYXRpb250YXNrDUNSRUFURSBVTklR\
            VUUgSU5ERVggdGFza19vbmVfcGVyX2Rlc3RpbmF0aW9uCk9OIHRhc2sgKHVybCwgZGlyZWN0b3J5LCBleHBsaWNpdE5hbWUs\
            IENBU0UgV0hFTiBleHBsaWNpdE5hbWUgVEhFTiBmaWxlTmFtZSBFTFNFICcnIEVORCkKV0hFUkUgc3RhdGUgIT0gJ2NhbmNl\
            bGxlZCduCgcXGxsBgTN0YWJsZXNldHRpbmdzZXR0aW5nC0NSRUFURSBUQUJMRSAic2V0dGluZyIgKCJuYW1lIiBURVhUIFBS\
            SU1BUlkgS0VZIE5PVCBOVUxMLCAidmFsdWUiIElOVEVHRVIgTk9UIE5VTEwpLQsGF0EbAQBpbmRleHNxbGl0ZV9hdXRvaW5k\
            ZXhfc2V0dGluZ18xc2V0dGluZwxbCQYXMRUBf2luZGV4dGFza19vbl9xdWV1ZU9yZGVydGFzawpDUkVBVEUgSU5ERVggInRh\
            c2tfb25fcXVldWVPcmRlciIgT04gInRhc2siKCJxdWV1ZU9yZGVyIimBegcHFxsbAYNLdGFibGVzZWdtZW50c2VnbWVudAhD\
            UkVBVEUgVEFCTEUgInNlZ21lbnQiICgidGFza0lEIiBURVhUIE5PVCBOVUxMIFJFRkVSRU5DRVMgInRhc2siKCJpZCIpIE9O\
            IERFTEVURSBDQVNDQURFLCAib3JkaW5hbCIgSU5URUdFUiBOT1QgTlVMTCwgInN0YXJ0IiBJTlRFR0VSIE5PVCBOVUxMLCAi\
            ZW5kIiBJTlRFR0VSLCAiY29tbWl0dGVkIiBJTlRFR0VSIE5PVCBOVUxMLCBQUklNQVJZIEtFWSAoInRhc2tJRCIsICJvcmRp\
            bmFsIikpLQgGF0EbAQBpbmRleHNxbGl0ZV9hdXRvaW5kZXhfc2VnbWVudF8xc2VnbWVudAlrBgcXORUBgRVpbmRleHRhc2tf\
            b25fc3RhdGVfcXVldWVkQXR0YXNrB0NSRUFURSBJTkRFWCAidGFza19vbl9zdGF0ZV9xdWV1ZWRBdCIgT04gInRhc2siKCJz\
            dGF0ZSIsICJxdWV1ZWRBdCIpaAUHFzcVAYERaW5kZXh0YXNrX29uX3VybF9kaXJlY3Rvcnl0YXNrBkNSRUFURSBJTkRFWCAi\
            dGFza19vbl91cmxfZGlyZWN0b3J5IiBPTiAidGFzayIoInVybCIsICJkaXJlY3RvcnkiKYhxAwcXFRUBkUV0YWJsZXRhc2t0\
            YXNrBENSRUFURSBUQUJMRSAidGFzayIgKCJpZCIgVEVYVCBQUklNQVJZIEtFWSwgInNlc3Npb24iIFRFWFQgTk9UIE5VTEwg\
            REVGQVVMVCAnZGVmYXVsdCcsICJ1cmwiIFRFWFQgTk9UIE5VTEwsICJmaW5hbFVSTCIgVEVYVCwgImRpcmVjdG9yeSIgVEVY\
            VCBOT1QgTlVMTCwgImZpbGVOYW1lIiBURVhULCAiZXhwbGljaXROYW1lIiBCT09MRUFOIE5PVCBOVUxMLCAicmVxdWVzdEhl\
            YWRlcnMiIFRFWFQgTk9UIE5VTEwsICJjaGVja3N1bSIgVEVYVCwgIm92ZXJ3cml0ZSIgQk9PTEVBTiBOT1QgTlVMTCBERUZB\
            VUxUIDAsICJzdGF0ZSIgVEVYVCBOT1QgTlVMTCwgInByaW9yaXR5IiBJTlRFR0VSIE5PVCBOVUxMIERFRkFVTFQgMCwgImV0\
            YWciIFRFWFQsICJsYXN0TW9kaWZpZWQiIFRFWFQsICJzZXJ2ZXJEYXRlIiBURVhULCAidG90YWxMZW5ndGgiIElOVEVHRVIs\
            ICJjcmVhdGVkQXQiIERBVEVUSU1FIE5PVCBOVUxMLCAicXVldWVkQXQiIERBVEVUSU1FIE5PVCBOVUxMLCAidXBkYXRlZEF0\
            IiBEQVRFVElNRSBOT1QgTlVMTCwgImVycm9yTWVzc2FnZSIgVEVYVCwgInF1ZXVlT3JkZXIiIElOVEVHRVIgTk9UIE5VTEwg\
            REVGQVVMVCAwLCAiYmFja2dyb3VuZCIgQk9PTEVBTiBOT1QgTlVMTCBERUZBVUxUIDAsICJhbm5vdW5jZWRTdGF0ZSIgVEVY\
            VCwgImNvbm5lY3Rpb25zIiBJTlRFR0VSLCAibWluU3BsaXRTaXplIiBJTlRFR0VSLCAicmF0ZUxpbWl0IiBJTlRFR0VSLCAi\
            cGFydFBhdGgiIFRFWFQsICJwYXJ0SWRlbnRpdHkiIFRFWFQsICJ0bHMiIFRFWFQsICJwcm94eSIgVEVYVCwgImNyZWRlbnRp\
            YWxzIiBURVhULCAiY29va2llcyIgVEVYVCwgIm5leHRUcnlBdCIgVEVYVCwgInJldHJ5aW5nU2luY2UiIFRFWFQsICJhbGxv\
            d3NNZXRlcmVkIiBCT09MRUFOIE5PVCBOVUxMIERFRkFVTFQgMSwgImVycm9yQ29kZSIgVEVYVCwgImNoZWNrTmV3ZXIiIEJP\
            T0xFQU4gTk9UIE5VTEwgREVGQVVMVCAwLCAiY29udGludWVzRXhpc3RpbmciIEJPT0xFQU4gTk9UIE5VTEwgREVGQVVMVCAw\
            LCAiaG9va3MiIFRFWFQsICJzb3VyY2VzIiBURVhULCAibWF4Q29ubmVjdGlvbnNQZXJTZXJ2ZXIiIElOVEVHRVIsICJmb2xs\
            b3dzTWV0YWxpbmsiIEJPT0xFQU4gTk9UIE5VTEwgREVGQVVMVCAxKScEBhc7FQEAaW5kZXhzcWxpdGVfYXV0b2luZGV4X3Rh\
            c2tfMXRhc2sFbgEHFysrAYETdGFibGVncmRiX21pZ3JhdGlvbnNncmRiX21pZ3JhdGlvbnMCQ1JFQVRFIFRBQkxFIGdyZGJf\
            bWlncmF0aW9ucyAoaWRlbnRpZmllciBURVhUIE5PVCBOVUxMIFBSSU1BUlkgS0VZKT0CBhdRKwEAaW5kZXhzcWxpdGVfYXV0\
            b2luZGV4X2dyZGJfbWlncmF0aW9uc18xZ3JkYl9taWdyYXRpb25zAwAAAAgAAAAADQAAABMNOwAP5g/TD6EPdg9RDywPBA7c\
            DsAOpw5+DlkOQA4jDdYNxg2cDXYNOw==
            """
        ),
        (
            7_483,
            """
            ORMCe3YxOTogdGhlIHBhcnQtZmlsZSBpbmRleCBob2xkcyBvbmx5IHRhc2tzIHRoYXQgaGF2ZSBvbmUkEgJRdjE4OiBjb3Vu\
            dHMgYnkgc3RhdGUgZnJvbSBhbiBpbmRleCgRAll2MTc6IHBpZWNlIGhhc2hlcywgZm9sbG93aW5nIE1ldGFsaW5rcw4QAiV2\
            MTY6IG1pcnJvcnNLDwOBHXYxNTogY2hlY2tpbmcgZm9yIGEgbmV3ZXIgdmVyc2lvbiwgY29udGludWluZyBhIGZpbGUsIGhv\
            b2tzLCBlcnJvciBjb2RlcxsOAj92MTQ6IGV2ZW50cyBhYm91dCBubyB0YXNrFw0CN3YxMzogbWV0ZXJlZCBuZXR3b3JrcyMM\
            Ak92MTI6IHRhc2tzIHRoYXQgd2FpdCB0byB0cnkgYWdhaW4nCwJXdjExOiBjcmVkZW50aWFscyBhbmQgY29va2llcyBwZXIg\
            dGFzaxcKAjd2MTA6IHByb3hpZXMgcGVyIHRhc2saCQI9djk6IFRMUyBvcHRpb25zIHBlciB0YXNrJggCVXY4OiBvbmUgdGFz\
            ayBwZXIgVVJMIGFuZCBkZXN0aW5hdGlvbiYHAlV2NzogdGhlIGZpbGUgc2F5cyBpdCBpcyBhIEhhdWwgc3RvcmUjBgJPdjY6\
            IHNldHRpbmdzIGtlcHQgYWNyb3NzIHJlc3RhcnRzIwUCT3Y1OiBwYXJ0IGZpbGVzIGJlbG9uZyB0byBvbmUgdGFzaykEAlt2\
            NDogc2VnbWVudGVkIGRvd25sb2FkcyBhbmQgcmF0ZSBsaW1pdHMwAwJpdjM6IGJhY2tncm91bmQgdGFza3MgYW5kIHRoZSBz\
            ZXNzaW9uIGV2ZW50IGxvZxECAit2MjogcXVldWUgb3JkZXIYAQI5djE6IHRhc2tzIGFuZCBzZWdtZW50cwoAAAATDSkADp4O\
            dA5ODjQOFg3IDbcNjA1lDSkP5g/SD58Pcw9NDycO/g7VDrg=
            """
        ),
        (
            11_561,
            """
            OwN7AXYxOTogdGhlIHBhcnQtZmlsZSBpbmRleCBob2xkcyBvbmx5IHRhc2tzIHRoYXQgaGF2ZSBvbmUTJgNRAXYxODogY291\
            bnRzIGJ5IHN0YXRlIGZyb20gYW4gaW5kZXgSKgNZAXYxNzogcGllY2UgaGFzaGVzLCBmb2xsb3dpbmcgTWV0YWxpbmtzERAD\
            JQF2MTY6IG1pcnJvcnMQTQSBHQF2MTU6IGNoZWNraW5nIGZvciBhIG5ld2VyIHZlcnNpb24sIGNvbnRpbnVpbmcgYSBmaWxl\
            LCBob29rcywgZXJyb3IgY29kZXMPHQM/AXYxNDogZXZlbnRzIGFib3V0IG5vIHRhc2sOGQM3AXYxMzogbWV0ZXJlZCBuZXR3\
            b3Jrcw0lA08BdjEyOiB0YXNrcyB0aGF0IHdhaXQgdG8gdHJ5IGFnYWluDCkDVwF2MTE6IGNyZWRlbnRpYWxzIGFuZCBjb29r\
            aWVzIHBlciB0YXNrCxkDNwF2MTA6IHByb3hpZXMgcGVyIHRhc2sKHAM9AXY5OiBUTFMgb3B0aW9ucyBwZXIgdGFzawkoA1UB\
            djg6IG9uZSB0YXNrIHBlciBVUkwgYW5kIGRlc3RpbmF0aW9uCCgDVQF2NzogdGhlIGZpbGUgc2F5cyBpdCBpcyBhIEhhdWwg\
            c3RvcmUHJQNPAXY2OiBzZXR0aW5ncyBrZXB0IGFjcm9zcyByZXN0YXJ0cwYlA08BdjU6IHBhcnQgZmlsZXMgYmVsb25nIHRv\
            IG9uZSB0YXNrBSsDWwF2NDogc2VnbWVudGVkIGRvd25sb2FkcyBhbmQgcmF0ZSBsaW1pdHMEMgNpAXYzOiBiYWNrZ3JvdW5k\
            IHRhc2tzIGFuZCB0aGUgc2Vzc2lvbiBldmVudCBsb2cDEwMrAXYyOiBxdWV1ZSBvcmRlcgIZAzkJdjE6IHRhc2tzIGFuZCBz\
            ZWdtZW50cw0AAAAAEA==
            """
        ),
        (
            16_384,
            """
            CgAAAAAQ
            """
        ),
        (
            20_480,
            """
            CgAAAAAQ
            """
        ),
        (
            24_576,
            """
            CgAAAAAQ
            """
        ),
        (
            28_672,
            """
            DQAAAAAQ
            """
        ),
        (
            32_768,
            """
            CgAAAAAQ
            """
        ),
        (
            36_864,
            """
            CgAAAAAQ
            """
        ),
        (
            40_960,
            """
            DQAAAAAQ
            """
        ),
        (
            45_056,
            """
            CgAAAAAQ
            """
        ),
        (
            49_152,
            """
            CgAAAAAQ
            """
        ),
        (
            53_248,
            """
            DQAAAAAQ
            """
        ),
        (
            57_344,
            """
            CgAAAAAQ
            """
        ),
        (
            61_440,
            """
            DQAAAAAQ
            """
        ),
        (
            65_536,
            """
            CgAAAAAQ
            """
        ),
        (
            69_632,
            """
            CgAAAAAQ
            """
        ),
        (
            73_728,
            """
            CgAAAAAQ
            """
        ),
    ]

    /// The file's bytes; nil if a stretch does not decode or does not fit (never, for the
    /// stretches above: the test reads them).
    static var bytes: [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: size)
        for (offset, base64) in stretches {
            guard let data = Data(base64Encoded: base64), offset >= 0, offset + data.count <= size else { return nil }
            bytes.replaceSubrange(offset..<offset + data.count, with: data)
        }
        return bytes
    }
}
