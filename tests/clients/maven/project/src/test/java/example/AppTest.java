package example;

import static org.junit.Assert.assertEquals;

import org.junit.Test;

public class AppTest {
    @Test
    public void greets() {
        assertEquals("Hello, World!", App.greet("world"));
        assertEquals("Hello, World!", App.greet(" "));
    }
}
